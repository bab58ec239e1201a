package webhook

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/apis/apiserver"
	apiserverinstall "k8s.io/apiserver/pkg/apis/apiserver/install"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"crucible.dev/crucible/internal/reload"
)

// ErrInvalidConfig wraps every error of ParseConfig and LoadConfig about the
// file's content (size, syntax, unknown fields, validation).
var ErrInvalidConfig = errors.New("invalid authn webhook config")

const (
	// MaxConfigBytes bounds the configuration file: it is read whole on every
	// change, and nothing legitimate comes near it.
	MaxConfigBytes = 1 << 20

	// DefaultJWKSMinRefreshInterval applies when jwksMinRefreshInterval is not
	// set. It bounds the fetches a flood of unknown key ids can cause, while
	// a rotated hub key is still picked up within seconds.
	DefaultJWKSMinRefreshInterval = 10 * time.Second

	// DefaultUnknownKeyIDGrace applies when a provider sets no
	// unknownKeyIDGrace: four times the mirror's default cache TTL (30s),
	// so a hub key rotation reaches the webhook through the mirror before
	// an unknown kid becomes a definitive (and cached) no.
	DefaultUnknownKeyIDGrace = 2 * time.Minute

	// maxUnknownKeyIDGrace bounds the grace: past it a forged kid should be
	// a definitive no.
	maxUnknownKeyIDGrace = time.Hour

	// DefaultMaxKeyAge applies when a provider sets no maxKeyAge: a
	// controller outage of a day does not cut the hub off a spoke whose
	// webhook restarts, and a hub key removed meanwhile stays trusted by
	// that spoke for at most as long.
	DefaultMaxKeyAge = 24 * time.Hour

	// maxMaxKeyAge bounds maxKeyAge: a removed hub key must stop being
	// trusted some day even on a spoke that never reaches the mirror.
	maxMaxKeyAge = 30 * 24 * time.Hour

	// minJWKSMinRefreshInterval keeps the rate limit meaningful.
	minJWKSMinRefreshInterval = time.Second

	// maxProviders is kube-apiserver's limit on jwt authenticators.
	maxProviders = 64
)

// Config is a validated webhook configuration. Build one with ParseConfig or
// LoadConfig; a Config is never modified after that.
type Config struct {
	// JWKSMinRefreshInterval is the minimum time between two fetches of one
	// provider's keys.
	JWKSMinRefreshInterval time.Duration
	// Providers are the token issuers the webhook accepts, in file order.
	Providers []ProviderConfig

	// digest is the SHA-256 of the bytes the Config was parsed from, so the
	// Reloader can tell whether the file changed since.
	digest [sha256.Size]byte
}

// ProviderConfig is one token issuer.
type ProviderConfig struct {
	// Name identifies the provider in logs, metrics and /readyz.
	Name string
	// AllowedSubjects are the exact sub claims accepted; empty accepts nobody.
	AllowedSubjects []string
	// JWT is the provider in kube-apiserver's internal form, DiscoveryURL
	// included (the webhook's key set uses it; the library never sees it).
	JWT apiserver.JWTAuthenticator
	// UnknownKeyIDGrace is how long after a key id is first seen, absent
	// from freshly fetched keys, its tokens are answered status.error
	// (which kube-apiserver does not cache) rather than authenticated:false
	// (which it caches for two minutes). After a hub key rotation the
	// mirror may serve the old JWKS for up to its TTL; without the grace the
	// controller would be locked out of the spoke for the API server's
	// cache lifetime. 0 disables it.
	UnknownKeyIDGrace time.Duration
	// MaxKeyAge is how long after their fetch persisted keys (--state-dir)
	// may still verify, after a restart during which discovery fails; it
	// is also how long a hub key removed while the spoke cannot reach the
	// mirror stays trusted. 0 turns persistence off for the provider.
	MaxKeyAge time.Duration
}

// fileConfig is the configuration file as written.
type fileConfig struct {
	JWKSMinRefreshInterval string         `json:"jwksMinRefreshInterval,omitempty"`
	Providers              []fileProvider `json:"providers"`
}

// fileProvider is a v1 AuthenticationConfiguration jwt entry plus crucible's
// fields, so the file reads like the configuration it stands in for.
type fileProvider struct {
	Name              string   `json:"name"`
	AllowedSubjects   []string `json:"allowedSubjects,omitempty"`
	UnknownKeyIDGrace *string  `json:"unknownKeyIDGrace,omitempty"` // a duration; default DefaultUnknownKeyIDGrace
	MaxKeyAge         *string  `json:"maxKeyAge,omitempty"`         // a duration; default DefaultMaxKeyAge

	apiserverv1.JWTAuthenticator `json:",inline"`
}

// apiserverScheme converts v1 jwt entries to the internal type that
// k8s.io/apiserver's validation and authenticator take.
var apiserverScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	apiserverinstall.Install(s)
	return s
}()

// LoadConfig reads and parses the configuration file at path.
func LoadConfig(path string) (*Config, error) {
	data, err := reload.ReadFile(path, MaxConfigBytes)
	if err != nil {
		return nil, fmt.Errorf("read authn webhook config: %w", err)
	}
	return ParseConfig(data)
}

// ParseConfig decodes data strictly (unknown and duplicate fields are errors)
// and validates it, reporting every problem at once, each with its path.
//
// YAML becomes JSON first, then is decoded case-sensitively, as kube-apiserver
// reads its own configuration files; unknown fields are reported with their
// paths, together with the validation errors.
func ParseConfig(data []byte) (*Config, error) {
	if len(data) > MaxConfigBytes {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrInvalidConfig, MaxConfigBytes)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("%w: empty file", ErrInvalidConfig)
	}
	jsonData, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	var f fileConfig
	strictErrs, err := kjson.UnmarshalStrict(jsonData, &f)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	cfg, errs := validateConfig(&f)
	if len(strictErrs)+len(errs) > 0 {
		return nil, configError(strictErrs, errs)
	}
	cfg.digest = sha256.Sum256(data)
	return cfg, nil
}

// configError lists every problem on its own line.
func configError(strictErrs []error, errs field.ErrorList) error {
	var lines []string
	for _, e := range strictErrs {
		lines = append(lines, e.Error())
	}
	for _, e := range errs {
		lines = append(lines, e.Error())
	}
	return fmt.Errorf("%w:\n  %s", ErrInvalidConfig, strings.Join(lines, "\n  "))
}

// convertJWT converts a v1 jwt entry to kube-apiserver's internal type
// through the apiserver group's scheme.
func convertJWT(in *apiserverv1.JWTAuthenticator) (apiserver.JWTAuthenticator, error) {
	var out apiserver.JWTAuthenticator
	err := apiserverScheme.Convert(in, &out, nil)
	return out, err
}

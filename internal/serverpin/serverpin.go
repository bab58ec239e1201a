// Package serverpin owns the consumer's server pins (R-SEC1): the file,
// kept by whoever consumes crucible's ClusterProfiles, that says per spoke
// the server and CA its token may be sent to and the audience it is for.
// `crucible credential` checks an exec plugin's cluster against it, and
// the controller a ClusterProfile that would become a spoke.
package serverpin

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/rest"
	kjson "sigs.k8s.io/json"

	"crucible.dev/crucible/internal/render"
)

// The server pins (R-SEC1): a ClusterProfile's status is written by
// whoever holds that RBAC on the hub, so what it says may choose a spoke,
// never where the spoke's token goes. The consumer's own configuration (the
// file --server-pins names, mounted from its own ConfigMap) says, per
// spoke, the server and CA its token may be sent to and the audience it is
// projected for; the exec info client-go builds from the ClusterProfile
// must agree with it, or no token leaves the plugin.

// maxPinsBytes bounds the pins file: a hundred spokes with a CA each are
// about 300 KiB.
const maxPinsBytes = 4 << 20

// Refusals of the pin checks, each naming the check for the stderr line
// client-go passes through (it reports only "exit status 1" itself).
var (
	// ErrNoPins: a cluster config arrived, and the consumer pinned nothing.
	ErrNoPins = errors.New("no server pins")
	// ErrServerPin: spec.cluster (server, CA, TLS settings) is not what the
	// consumer pinned for the cluster.
	ErrServerPin = errors.New("server pin check failed")
	// ErrAudiencePin: the config asks for an audience the pin does not allow.
	ErrAudiencePin = errors.New("audience pin check failed")
)

// Audience is the one audience pin's token may carry.
func Audience(p render.ServerPin) string {
	if p.Audience == "" {
		return p.Name
	}
	return p.Audience
}

// Load reads and checks the pins file strictly: a typo in the
// consumer's own trust configuration is an error, never an unpinned spoke.
func Load(file string) (map[string]render.ServerPin, error) {
	if file == "" {
		return nil, fmt.Errorf("%w: a cluster config needs --server-pins FILE, the consumer's own record of each spoke's server "+
			"(crucible render clusterprofile --server-pins; the hub chart's ConfigMap key server-pins.json)", ErrNoPins)
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("%w: --server-pins: %w", ErrNoPins, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxPinsBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: --server-pins %s: %w", ErrNoPins, file, err)
	}
	if len(data) > maxPinsBytes {
		return nil, fmt.Errorf("%w: --server-pins %s: larger than %d bytes", ErrNoPins, file, maxPinsBytes)
	}
	var pins render.ServerPins
	strict, err := kjson.UnmarshalStrict(data, &pins)
	if err != nil {
		return nil, fmt.Errorf("%w: --server-pins %s: %w", ErrNoPins, file, err)
	}
	var errs []string
	for _, e := range strict {
		errs = append(errs, e.Error())
	}
	byName := map[string]render.ServerPin{}
	for i, p := range pins.Clusters {
		for _, e := range validatePin(p, field.NewPath("clusters").Index(i), byName) {
			errs = append(errs, e.Error())
		}
		byName[p.Name] = p
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: --server-pins %s: %s", ErrNoPins, file, strings.Join(errs, "; "))
	}
	return byName, nil
}

// validatePin holds a pin to what render writes: a fleet name once, an
// https server, a PEM bundle of certificates if any.
func validatePin(p render.ServerPin, path *field.Path, seen map[string]render.ServerPin) field.ErrorList {
	var errs field.ErrorList
	if len(validation.IsDNS1123Label(p.Name)) > 0 {
		errs = append(errs, field.Invalid(path.Child("name"), p.Name, "must be a DNS label (a fleet cluster name)"))
	} else if _, dup := seen[p.Name]; dup {
		errs = append(errs, field.Duplicate(path.Child("name"), p.Name))
	}
	if u, err := NormalServer(p.Server, true); err != nil || !strings.HasPrefix(u, "https://") {
		errs = append(errs, field.Invalid(path.Child("server"), p.Server, "must be an https URL"))
	}
	if len(p.CAData) > 0 {
		if _, err := render.CACertificates(p.CAData); err != nil {
			errs = append(errs, field.Invalid(path.Child("certificate-authority-data"), "(PEM)", err.Error()))
		}
	}
	if strings.TrimSpace(p.Audience) != p.Audience {
		errs = append(errs, field.Invalid(path.Child("audience"), p.Audience, "leading or trailing whitespace"))
	}
	return errs
}

// NormalServer is server as client-go dials it: rest.DefaultServerURL's
// defaulting (a bare host:port is https only when TLS is configured, as
// client-go decides), then scheme and host lower-cased, the scheme's default
// port dropped and trailing slashes of the path trimmed, so that
// https://API.example.com:443/ and https://api.example.com are one server.
func NormalServer(server string, tls bool) (string, error) {
	u, _, err := rest.DefaultServerURL(server, "", schema.GroupVersion{}, tls)
	if err != nil {
		return "", err
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return "", fmt.Errorf("%q: no user info, query or fragment", server)
	}
	scheme, host, port := strings.ToLower(u.Scheme), strings.ToLower(u.Hostname()), u.Port()
	if (scheme == "https" && port == "443") || (scheme == "http" && port == "80") {
		port = ""
	}
	switch {
	case port != "":
		host = net.JoinHostPort(host, port)
	case strings.Contains(host, ":"):
		host = "[" + host + "]"
	}
	n := url.URL{Scheme: scheme, Host: host, Path: strings.TrimRight(u.Path, "/")}
	return n.String(), nil
}

// Cluster is the connection a credential is about to be sent over, as a
// ClusterProfile's access provider gives it (spec.cluster of an exec
// plugin's info, or status.accessProviders[].cluster itself).
type Cluster struct {
	Server, TLSServerName, ProxyURL string
	Insecure                        bool
	CAData                          []byte
	// Field names the cluster in refusals; "" is spec.cluster, an exec
	// plugin's.
	Field string
}

// field is c's name in refusals.
func (c Cluster) field() string {
	if c.Field == "" {
		return "spec.cluster"
	}
	return c.Field
}

// Check refuses unless the cluster client-go is about to dial is
// the pinned one: the same server, verified by the same CAs (none, if the
// pin has none), with no setting of the ClusterProfile's that could let
// anyone else read the request (skip-verify, another TLS name, a proxy).
func Check(pin render.ServerPin, c Cluster) error {
	fail := func(format string, a ...any) error {
		return fmt.Errorf("%w: cluster %s: %s", ErrServerPin, pin.Name, fmt.Sprintf(format, a...))
	}
	if c.Server == "" {
		return fail("%s.server is missing, and the cluster is pinned to %s (run the plugin with provideClusterInfo: true)", c.field(), pin.Server)
	}
	want, _ := NormalServer(pin.Server, true)
	got, err := NormalServer(c.Server, len(c.CAData) > 0 || c.Insecure)
	if err != nil || got != want {
		return fail("%s.server %q is not the pinned server %q", c.field(), c.Server, pin.Server)
	}
	switch {
	case c.Insecure:
		return fail("%s.insecure-skip-tls-verify is set", c.field())
	case c.TLSServerName != "":
		return fail("%s.tls-server-name %q is set (the pin verifies the server's own name)", c.field(), c.TLSServerName)
	case c.ProxyURL != "":
		return fail("%s.proxy-url %q is set (pins allow no proxy)", c.field(), c.ProxyURL)
	}
	if !sameCAs(pin.CAData, c.CAData) {
		if len(pin.CAData) == 0 {
			return fail("%s.certificate-authority-data is set, and the pin trusts the system roots only", c.field())
		}
		return fail("%s.certificate-authority-data is not the pinned CA bundle", c.field())
	}
	return nil
}

// sameCAs: both empty, or the same certificates in the same order.
func sameCAs(pinned, given []byte) bool {
	if len(pinned) == 0 || len(given) == 0 {
		return len(pinned) == 0 && len(given) == 0
	}
	a, err := render.CACertificates(pinned)
	if err != nil {
		return false
	}
	b, err := render.CACertificates(given)
	if err != nil || len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

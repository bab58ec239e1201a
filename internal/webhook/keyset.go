package webhook

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"crucible.dev/crucible/internal/certpool"
	"crucible.dev/crucible/internal/jwt"
	"crucible.dev/crucible/internal/metrics"
)

const (
	// fetchTimeout bounds one discovery+JWKS fetch. Waiting requests give up
	// earlier if their own context ends.
	fetchTimeout = 10 * time.Second
)

// errIssuerMismatch marks a discovery document naming another issuer.
var errIssuerMismatch = errors.New("discovery document issuer mismatch")

// keySource says where a provider's keys come from and how they are cached.
// A key set is reused across config reloads while its source is unchanged,
// so a reload neither refetches keys nor loses them.
type keySource struct {
	provider     string
	issuer       string
	discoveryURL string
	ca           string
	minInterval  time.Duration
	grace        time.Duration
}

// keySet is one provider's keys: the shared cache of internal/jwt over this
// package's discovery fetch. All cache logic (rate limit, single flight,
// last good keys, unknown-kid grace) is jwt.KeySet's.
type keySet struct {
	*jwt.KeySet
	src    keySource
	client *http.Client
	log    *slog.Logger
}

func newKeySet(src keySource, now func() time.Time, log *slog.Logger) (*keySet, error) {
	client, err := fetchClient(src.ca)
	if err != nil {
		return nil, err
	}
	k := &keySet{src: src, client: client, log: log}
	k.KeySet = jwt.NewKeySet(jwt.KeySetOptions{
		Fetch:           k.fetchCounted,
		MinRefresh:      src.minInterval,
		UnknownKidGrace: src.grace,
		FetchTimeout:    fetchTimeout,
		Now:             now,
	})
	return k, nil
}

// fetchClient verifies the discovery and JWKS servers with ca (PEM), or the
// system roots when ca is empty, and refuses redirects away from https.
func fetchClient(ca string) (*http.Client, error) {
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pool, err := certpool.Parse([]byte(ca), "certificateAuthority")
		if err != nil {
			return nil, err
		}
		tlsConfig.RootCAs = pool
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.TLSClientConfig = tlsConfig
	return &http.Client{
		Transport: transport,
		Timeout:   fetchTimeout,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if req.URL.Scheme != "https" || len(via) >= 5 {
				return fmt.Errorf("refusing redirect to %s", req.URL.Redacted())
			}
			return nil
		},
	}, nil
}

// fetchCounted is fetch with its metric and log line.
func (k *keySet) fetchCounted(ctx context.Context) ([]jose.JSONWebKey, error) {
	keys, err := k.fetch(ctx)
	if err != nil {
		metrics.WebhookJWKSFetches.WithLabelValues(k.src.provider, "failure").Inc()
		k.log.Warn("fetching provider keys failed", "provider", k.src.provider, "error", err)
		return nil, err
	}
	metrics.WebhookJWKSFetches.WithLabelValues(k.src.provider, "success").Inc()
	k.log.Info("fetched provider keys", "provider", k.src.provider, "keys", len(keys))
	return keys, nil
}

// fetch reads the discovery document, requires its issuer to equal the
// configured one byte for byte, and reads the keys at its jwks_uri.
func (k *keySet) fetch(ctx context.Context) ([]jose.JSONWebKey, error) {
	var doc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if err := jwt.GetJSON(ctx, k.client, k.src.discoveryURL, &doc); err != nil {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	if doc.Issuer != k.src.issuer {
		return nil, fmt.Errorf("%w: %s names issuer %q, configured %q", errIssuerMismatch, k.src.discoveryURL, doc.Issuer, k.src.issuer)
	}
	if u, err := url.Parse(doc.JWKSURI); err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("discovery: jwks_uri %q is not an https URL", doc.JWKSURI)
	}
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := jwt.GetJSON(ctx, k.client, doc.JWKSURI, &set); err != nil {
		return nil, fmt.Errorf("jwks: %w", err)
	}
	keys, skipped := jwt.UsableKeys(set.Keys)
	if skipped > 0 {
		k.log.Warn("ignored unusable keys in JWKS", "provider", k.src.provider, "ignored", skipped)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("jwks: no usable signing keys at %s", doc.JWKSURI)
	}
	return keys, nil
}

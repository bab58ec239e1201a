package webhook

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"crucible.dev/crucible/internal/jwt"
	"crucible.dev/crucible/internal/metrics"
)

const (
	// fetchTimeout bounds one discovery+JWKS fetch. Waiting requests give up
	// earlier if their own context ends.
	fetchTimeout = 10 * time.Second
	// maxDocumentBytes bounds a discovery document or JWKS.
	maxDocumentBytes = 1 << 20
)

var (
	// errKeysUnavailable marks a provider whose keys could not be fetched, so
	// no definitive answer is possible (the review answers status.error).
	errKeysUnavailable = errors.New("provider keys unavailable")
	// errIssuerMismatch marks a discovery document naming another issuer.
	errIssuerMismatch = errors.New("discovery document issuer mismatch")
)

// keySource says where a provider's keys come from. A key set is reused
// across config reloads while its source is unchanged, so a reload neither
// refetches keys nor loses them.
type keySource struct {
	provider     string
	issuer       string
	discoveryURL string
	ca           string
	minInterval  time.Duration
}

// keySet holds one provider's verification keys. Unlike go-oidc's
// RemoteKeySet, which refetches on every unknown kid, it fetches at most once
// per minInterval and keeps the last good keys when a fetch fails. All
// fetching happens in prepare; VerifySignature (called by the JWT library)
// never does I/O.
type keySet struct {
	src    keySource
	client *http.Client
	now    func() time.Time
	log    *slog.Logger

	keys     atomic.Pointer[[]jose.JSONWebKey] // nil until the first good fetch
	fetching chan struct{}                     // a one-slot semaphore: one fetch at a time

	mu          sync.Mutex // guards the fields below
	lastAttempt time.Time
	lastErr     error
}

func newKeySet(src keySource, now func() time.Time, log *slog.Logger) (*keySet, error) {
	client, err := fetchClient(src.ca)
	if err != nil {
		return nil, err
	}
	return &keySet{src: src, client: client, now: now, log: log, fetching: make(chan struct{}, 1)}, nil
}

// fetchClient verifies the discovery and JWKS servers with ca (PEM), or the
// system roots when ca is empty, and refuses redirects away from https.
func fetchClient(ca string) (*http.Client, error) {
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(ca)) {
			return nil, errors.New("certificateAuthority holds no PEM certificate")
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

// has reports whether keys are loaded and include kid ("" matches any key).
func (k *keySet) has(kid string) bool {
	keys := k.keys.Load()
	if keys == nil {
		return false
	}
	if kid == "" {
		return true
	}
	for _, key := range *keys {
		if key.KeyID == kid {
			return true
		}
	}
	return false
}

// prepare makes sure the keys a token with key id kid needs are loaded, if
// they exist: it fetches when there are no keys yet or kid is unknown, at
// most once per minInterval. It returns an error wrapping errKeysUnavailable
// when no definitive answer is possible: no keys at all, or kid unknown and
// the latest fetch failed. A nil return with kid still unknown means the key
// set is fresh and the token's key does not exist.
func (k *keySet) prepare(ctx context.Context, kid string) error {
	if k.has(kid) {
		return nil
	}
	select {
	case k.fetching <- struct{}{}:
		defer func() { <-k.fetching }()
	case <-ctx.Done():
		return fmt.Errorf("%w: waiting for a fetch: %w", errKeysUnavailable, ctx.Err())
	}
	if k.has(kid) { // fetched while we waited
		return nil
	}
	k.mu.Lock()
	limited := !k.lastAttempt.IsZero() && k.now().Sub(k.lastAttempt) < k.src.minInterval
	lastErr := k.lastErr
	k.mu.Unlock()
	if !limited {
		return k.refresh(ctx)
	}
	if lastErr != nil {
		return fmt.Errorf("%w: %w", errKeysUnavailable, lastErr)
	}
	if k.keys.Load() == nil {
		return fmt.Errorf("%w: not fetched yet", errKeysUnavailable)
	}
	return nil
}

// refresh fetches the keys now. It runs detached from the caller's
// cancellation, bounded by fetchTimeout, so a client hanging up does not
// waste the one fetch the rate limit allows.
func (k *keySet) refresh(ctx context.Context) error {
	k.mu.Lock()
	k.lastAttempt = k.now()
	k.mu.Unlock()

	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fetchTimeout)
	defer cancel()
	keys, err := k.fetch(fctx)

	k.mu.Lock()
	k.lastErr = err
	k.mu.Unlock()
	if err != nil {
		metrics.WebhookJWKSFetches.WithLabelValues(k.src.provider, "failure").Inc()
		k.log.Warn("fetching provider keys failed", "provider", k.src.provider, "error", err)
		return fmt.Errorf("%w: %w", errKeysUnavailable, err)
	}
	metrics.WebhookJWKSFetches.WithLabelValues(k.src.provider, "success").Inc()
	k.keys.Store(&keys)
	k.log.Info("fetched provider keys", "provider", k.src.provider, "keys", len(keys))
	return nil
}

// status reports whether keys are loaded and the latest fetch error, if any.
func (k *keySet) status() (ready bool, lastErr error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.keys.Load() != nil, k.lastErr
}

// fetch reads the discovery document, requires its issuer to equal the
// configured one byte for byte, and reads the keys at its jwks_uri.
func (k *keySet) fetch(ctx context.Context) ([]jose.JSONWebKey, error) {
	var doc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if err := k.getJSON(ctx, k.src.discoveryURL, &doc); err != nil {
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
	if err := k.getJSON(ctx, doc.JWKSURI, &set); err != nil {
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

func (k *keySet) getJSON(ctx context.Context, rawURL string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := k.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", rawURL, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDocumentBytes+1))
	if err != nil {
		return fmt.Errorf("GET %s: %w", rawURL, err)
	}
	if len(body) > maxDocumentBytes {
		return fmt.Errorf("GET %s: larger than %d bytes", rawURL, maxDocumentBytes)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("GET %s: %w", rawURL, err)
	}
	return nil
}

// VerifySignature implements the JWT library's KeySet: it checks the
// signature with the loaded key of the token's kid (or every loaded key when
// the token names none) and returns the payload. Algorithms outside
// signingAlgs, the JSON serialization and unknown crit headers fail parsing.
func (k *keySet) VerifySignature(_ context.Context, jwt string) ([]byte, error) {
	keys := k.keys.Load()
	if keys == nil {
		return nil, errKeysUnavailable
	}
	jws, err := jose.ParseSignedCompact(jwt, signingAlgs)
	if err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	if len(jws.Signatures) != 1 {
		return nil, errors.New("want exactly one signature")
	}
	header := jws.Signatures[0].Header
	for _, key := range *keys {
		if header.KeyID != "" && key.KeyID != header.KeyID {
			continue
		}
		if key.Algorithm != "" && key.Algorithm != header.Algorithm {
			continue
		}
		if payload, err := jws.Verify(key.Key); err == nil {
			return payload, nil
		}
	}
	return nil, fmt.Errorf("no key with id %q verifies the signature", header.KeyID)
}

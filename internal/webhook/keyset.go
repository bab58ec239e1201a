package webhook

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
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

	// stateTimeout bounds one read or write of the state store: a
	// ConfigMap on an API server that does not answer must neither hold
	// the start nor a fetch for long.
	stateTimeout = 10 * time.Second
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
	maxKeyAge    time.Duration // 0: keys not persisted
}

// keySet is one provider's keys: the shared cache of internal/jwt over this
// package's discovery fetch. All cache logic (rate limit, single flight,
// last good keys, unknown-kid grace) is jwt.KeySet's.
//
// With a state store, every good fetch is persisted, and a new key set starts
// from the persisted keys of its provider (jwt.Seed) while they are younger
// than maxKeyAge: a webhook restarted while the mirror is down still
// verifies the hub's tokens.
type keySet struct {
	*jwt.KeySet
	src    keySource
	client *http.Client
	log    *slog.Logger
	state  StateStore // nil when src.maxKeyAge is 0
	now    func() time.Time

	seedKIDs   []string  // key ids of the persisted keys seeded, for the log
	seedLogged sync.Once // the use of persisted keys, logged once per key set
}

func newKeySet(ctx context.Context, src keySource, state StateStore, now func() time.Time, log *slog.Logger) (*keySet, error) {
	client, err := fetchClient(src.ca)
	if err != nil {
		return nil, err
	}
	if src.maxKeyAge <= 0 {
		state = nil
	}
	k := &keySet{src: src, client: client, log: log, state: state, now: now}
	opts := jwt.KeySetOptions{
		Fetch:           k.fetchCounted,
		MinRefresh:      src.minInterval,
		UnknownKidGrace: src.grace,
		FetchTimeout:    fetchTimeout,
		Now:             now,
	}
	if state != nil {
		opts.Seed = k.loadSeed(ctx)
		opts.RefreshAfter = refreshAfter(src.maxKeyAge)
	}
	k.KeySet = jwt.NewKeySet(opts)
	return k, nil
}

// refreshAfter is how old keys in use may get before a verification
// refetches them in the background: often enough that the persisted fetch
// time stays well within maxKeyAge, so a restart finds them young.
func refreshAfter(maxKeyAge time.Duration) time.Duration {
	return min(maxKeyAge/4, time.Hour)
}

// loadSeed is the provider's persisted keys if they are its own and young
// enough, else nil; a file refused is logged with the reason.
func (k *keySet) loadSeed(ctx context.Context) *jwt.Seed {
	seed, err := k.readSeed(ctx)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		k.log.Warn("ignored persisted provider keys", "provider", k.src.provider, "store", k.state.String(), "reason", err)
		return nil
	}
	for _, key := range seed.Keys {
		k.seedKIDs = append(k.seedKIDs, key.KeyID)
	}
	return seed
}

func (k *keySet) readSeed(ctx context.Context) (*jwt.Seed, error) {
	ctx, cancel := context.WithTimeout(ctx, stateTimeout)
	defer cancel()
	data, err := k.state.read(ctx, k.src.provider)
	if err != nil {
		return nil, err
	}
	p, keys, err := decodeState(data)
	if err != nil {
		return nil, err
	}
	return trustState(p, keys, k.src, k.now())
}

// persist writes what a fetch returned; a failure costs only the restart
// case, so it is logged and serving goes on.
func (k *keySet) persist(ctx context.Context, f fetched) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stateTimeout)
	defer cancel()
	err := k.state.write(ctx, persisted{
		Version:      stateVersion,
		Provider:     k.src.provider,
		Issuer:       k.src.issuer,
		DiscoveryURL: k.src.discoveryURL,
		FetchedAt:    f.at.UTC(),
		Discovery:    f.discovery,
		JWKS:         f.jwks,
	})
	if err != nil {
		k.log.Warn("persisting provider keys failed", "provider", k.src.provider, "store", k.state.String(), "error", err)
	}
}

// logSeedUse logs, once, that the key set verifies with persisted keys
// because fetching failed: the key ids and fetch time, never the keys.
func (k *keySet) logSeedUse(fetchErr error) {
	held, ok := k.Held()
	if !ok || !held.Seeded {
		return
	}
	k.seedLogged.Do(func() {
		k.log.Warn("verifying with persisted provider keys: fetching failed", "provider", k.src.provider, "store", k.state.String(),
			"fetched_at", held.FetchedAt.UTC().Format(time.RFC3339), "age", k.now().Sub(held.FetchedAt).Round(time.Second).String(),
			"max_key_age", k.src.maxKeyAge.String(), "key_ids", k.seedKIDs, "error", fetchErr)
	})
}

// Key sources, as in /readyz and metrics.
const (
	sourceFetched   = "fetched"
	sourcePersisted = "persisted"
)

// source says where the keys verified with now come from and how old they
// are; ok is false when there are none.
func (k *keySet) source() (source string, age time.Duration, ok bool) {
	held, ok := k.Held()
	if !ok {
		return "", 0, false
	}
	source = sourceFetched
	if held.Seeded {
		source = sourcePersisted
	}
	return source, k.now().Sub(held.FetchedAt), true
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

// fetchCounted is fetch with its metric and log line, persisting what it
// fetched when state is kept.
func (k *keySet) fetchCounted(ctx context.Context) ([]jose.JSONWebKey, error) {
	f, err := k.fetch(ctx)
	if err != nil {
		metrics.WebhookJWKSFetches.WithLabelValues(k.src.provider, "failure").Inc()
		k.log.Warn("fetching provider keys failed", "provider", k.src.provider, "error", err)
		k.logSeedUse(err)
		return nil, err
	}
	metrics.WebhookJWKSFetches.WithLabelValues(k.src.provider, "success").Inc()
	k.log.Info("fetched provider keys", "provider", k.src.provider, "keys", len(f.keys))
	if k.state != nil {
		k.persist(ctx, f)
	}
	return f.keys, nil
}

// fetched is one good fetch: the usable keys, and the documents as served
// (what is persisted).
type fetched struct {
	keys      []jose.JSONWebKey
	discovery json.RawMessage
	jwks      json.RawMessage
	at        time.Time
}

// fetch reads the discovery document, requires its issuer to equal the
// configured one byte for byte, and reads the keys at its jwks_uri.
func (k *keySet) fetch(ctx context.Context) (fetched, error) {
	f := fetched{at: k.now()}
	var doc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if err := jwt.GetJSON(ctx, k.client, k.src.discoveryURL, &f.discovery); err != nil {
		return fetched{}, fmt.Errorf("discovery: %w", err)
	}
	if err := json.Unmarshal(f.discovery, &doc); err != nil {
		return fetched{}, fmt.Errorf("discovery: %w", err)
	}
	if doc.Issuer != k.src.issuer {
		return fetched{}, fmt.Errorf("%w: %s names issuer %q, configured %q", errIssuerMismatch, k.src.discoveryURL, doc.Issuer, k.src.issuer)
	}
	if u, err := url.Parse(doc.JWKSURI); err != nil || u.Scheme != "https" || u.Host == "" {
		return fetched{}, fmt.Errorf("discovery: jwks_uri %q is not an https URL", doc.JWKSURI)
	}
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := jwt.GetJSON(ctx, k.client, doc.JWKSURI, &f.jwks); err != nil {
		return fetched{}, fmt.Errorf("jwks: %w", err)
	}
	if err := json.Unmarshal(f.jwks, &set); err != nil {
		return fetched{}, fmt.Errorf("jwks: %w", err)
	}
	keys, skipped := jwt.UsableKeys(set.Keys)
	if skipped > 0 {
		k.log.Warn("ignored unusable keys in JWKS", "provider", k.src.provider, "ignored", skipped)
	}
	if len(keys) == 0 {
		return fetched{}, fmt.Errorf("jwks: no usable signing keys at %s", doc.JWKSURI)
	}
	f.keys = keys
	return f, nil
}

package ingest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"crucible.dev/crucible/internal/fleet"
	"crucible.dev/crucible/internal/jwt"
)

const (
	// jwksPath is where kube-apiserver serves its keys; used when the
	// discovery document cannot be read or names no usable jwks_uri.
	jwksPath = "/openid/v1/jwks"
	// fetchTimeout bounds one discovery+JWKS fetch.
	fetchTimeout = 10 * time.Second
	// maxDocumentBytes bounds a discovery document or JWKS.
	maxDocumentBytes = 1 << 20
)

// keySet holds one cluster's service-account signing keys, fetched through
// the cluster's federated client (the controller's spoke identity, allowed
// by SpokeRBAC to get the discovery URLs). It fetches at most once per
// minRefresh and keeps the last good keys when a fetch fails; verify never
// does I/O.
type keySet struct {
	cluster    string
	server     string // the spoke API's base URL, without a trailing slash
	http       *http.Client
	minRefresh time.Duration
	now        func() time.Time
	log        *slog.Logger

	keys     atomic.Pointer[[]jose.JSONWebKey] // nil until the first good fetch
	fetching chan struct{}                     // one fetch at a time

	mu          sync.Mutex
	lastAttempt time.Time
}

func newKeySet(c *fleet.Client, minRefresh time.Duration, now func() time.Time, log *slog.Logger) *keySet {
	hc := *c.HTTP // same transport (and token); never follow a redirect with the controller's token
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &keySet{
		cluster:    c.Entry.Name,
		server:     strings.TrimSuffix(c.Entry.Server, "/"),
		http:       &hc,
		minRefresh: minRefresh,
		now:        now,
		log:        log,
		fetching:   make(chan struct{}, 1),
	}
}

// refresh fetches the keys unless the last attempt is younger than
// minRefresh, and reports whether new keys were stored. With keys loaded it
// does not wait for a fetch already running (the caller decides with the
// keys it has); without any it waits, bounded by ctx. The fetch itself is
// detached from ctx, so a client hanging up does not waste the one fetch the
// limit allows.
func (k *keySet) refresh(ctx context.Context) bool {
	if k.keys.Load() != nil {
		select {
		case k.fetching <- struct{}{}:
		default:
			return false
		}
	} else {
		select {
		case k.fetching <- struct{}{}:
		case <-ctx.Done():
			return false
		}
	}
	defer func() { <-k.fetching }()

	k.mu.Lock()
	now := k.now()
	if !k.lastAttempt.IsZero() && now.Sub(k.lastAttempt) < k.minRefresh {
		k.mu.Unlock()
		return false
	}
	k.lastAttempt = now
	k.mu.Unlock()

	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fetchTimeout)
	defer cancel()
	keys, err := k.fetch(fctx)
	if err != nil {
		k.log.Warn("fetching cluster signing keys failed", "cluster", k.cluster, "error", err)
		return false
	}
	k.keys.Store(&keys)
	k.log.Info("fetched cluster signing keys", "cluster", k.cluster, "keys", len(keys))
	return true
}

// fetch reads the discovery document for the jwks_uri path and the keys at
// that path on the same server; when either fails it tries jwksPath. The
// jwks_uri's host is ignored: it may be an address the controller cannot
// reach, and the keys must come through the federated client.
func (k *keySet) fetch(ctx context.Context) ([]jose.JSONWebKey, error) {
	path := jwksPath
	var doc struct {
		JWKSURI string `json:"jwks_uri"`
	}
	if err := k.getJSON(ctx, "/.well-known/openid-configuration", &doc); err != nil {
		k.log.Debug("reading discovery document failed; using the default JWKS path", "cluster", k.cluster, "error", err)
	} else if u, err := url.Parse(doc.JWKSURI); err == nil && strings.HasPrefix(u.EscapedPath(), "/") {
		path = u.EscapedPath()
	}
	keys, err := k.fetchKeys(ctx, path)
	if err != nil && path != jwksPath {
		keys, err = k.fetchKeys(ctx, jwksPath)
	}
	return keys, err
}

func (k *keySet) fetchKeys(ctx context.Context, path string) ([]jose.JSONWebKey, error) {
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := k.getJSON(ctx, path, &set); err != nil {
		return nil, fmt.Errorf("jwks: %w", err)
	}
	keys, skipped := jwt.UsableKeys(set.Keys)
	if skipped > 0 {
		k.log.Warn("ignored unusable keys in JWKS", "cluster", k.cluster, "ignored", skipped)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("jwks: no usable signing keys at %s", path)
	}
	return keys, nil
}

func (k *keySet) getJSON(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.server+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json, application/jwk-set+json")
	resp, err := k.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDocumentBytes+1))
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	if len(body) > maxDocumentBytes {
		return fmt.Errorf("GET %s: larger than %d bytes", path, maxDocumentBytes)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	return nil
}

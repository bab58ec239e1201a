package ingest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
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
)

// keyFetcher reads one cluster's service-account signing keys through the
// cluster's federated client (the controller's spoke identity, allowed by
// SpokeRBAC to get the discovery URLs). The cache over it is internal/jwt's
// KeySet, shared with the authn webhook.
type keyFetcher struct {
	cluster string
	server  string // the spoke API's base URL, without a trailing slash
	http    *http.Client
	log     *slog.Logger
	issuer  *clusterIssuer // learns the issuer of every discovery document read
}

// discoveryDoc is what the drop-box reads of a discovery document.
type discoveryDoc struct {
	Issuer  string `json:"issuer"`
	JWKSURI string `json:"jwks_uri"`
}

// newKeySet is cluster c's key cache and its issuer. The key cache has no
// unknown-kid grace: the keys are read from the spoke itself, not through
// a cache that may lag behind a rotation.
func newKeySet(c *fleet.Client, minRefresh time.Duration, now func() time.Time, log *slog.Logger) (*jwt.KeySet, *clusterIssuer) {
	hc := *c.HTTP // same transport (and token); never follow a redirect with the controller's token
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	f := &keyFetcher{cluster: c.Entry.Name, server: strings.TrimSuffix(c.Entry.Server, "/"), http: &hc, log: log}
	f.issuer = newClusterIssuer(f.readIssuer, minRefresh, now)
	return jwt.NewKeySet(jwt.KeySetOptions{Fetch: f.fetchLogged, MinRefresh: minRefresh, FetchTimeout: fetchTimeout, Now: now}), f.issuer
}

// fetchLogged is fetch with its log line.
func (k *keyFetcher) fetchLogged(ctx context.Context) ([]jose.JSONWebKey, error) {
	keys, err := k.fetch(ctx)
	if err != nil {
		k.log.Warn("fetching cluster signing keys failed", "cluster", k.cluster, "error", err)
		return nil, err
	}
	k.log.Info("fetched cluster signing keys", "cluster", k.cluster, "keys", len(keys))
	return keys, nil
}

// fetch reads the discovery document for the jwks_uri path and the keys at
// that path on the same server; when either fails it tries jwksPath. The
// jwks_uri's host is ignored: it may be an address the controller cannot
// reach, and the keys must come through the federated client.
func (k *keyFetcher) fetch(ctx context.Context) ([]jose.JSONWebKey, error) {
	path := jwksPath
	var doc discoveryDoc
	if err := k.readDiscovery(ctx, &doc); err != nil {
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

// readDiscovery reads the discovery document into doc and teaches the
// cluster's issuer the one it names.
func (k *keyFetcher) readDiscovery(ctx context.Context, doc *discoveryDoc) error {
	if err := jwt.GetJSON(ctx, k.http, k.server+"/.well-known/openid-configuration", doc); err != nil {
		return err
	}
	k.issuer.learn(doc.Issuer)
	return nil
}

// readIssuer reads the discovery document for its issuer alone.
func (k *keyFetcher) readIssuer(ctx context.Context) {
	if err := k.readDiscovery(ctx, &discoveryDoc{}); err != nil {
		k.log.Warn("re-reading the discovery document for its issuer failed", "cluster", k.cluster, "error", err)
	}
}

func (k *keyFetcher) fetchKeys(ctx context.Context, path string) ([]jose.JSONWebKey, error) {
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := jwt.GetJSON(ctx, k.http, k.server+path, &set); err != nil {
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

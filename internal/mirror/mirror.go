// Package mirror serves a read-only mirror of the hub cluster's OIDC discovery
// document and JWKS on the controller's external listener (R-MI).
//
// It exists because the hub's service-account issuer is not publicly
// discoverable (ADR-0048): the issuer is https://kubernetes.default.svc, the
// hub API serves /.well-known/openid-configuration and /openid/v1/jwks only to
// authenticated callers, and the spokes cannot reach the hub API at all. The
// mirror fetches both documents with the controller's own service account and
// serves them to anyone; the spoke's authn webhook uses it as its discovery
// URL. The issuer passes through unchanged, because consumers compare it with
// the tokens' iss claim byte for byte; jwks_uri is rewritten to point at the
// mirror.
//
// The package owns a short cache per document. Concurrent misses share one
// upstream fetch and a failed fetch backs off, so clients of the public
// listener cannot drive load onto the hub API. While the hub API fails, the
// last good copy is served for a bounded staleness, then the mirror answers
// 503. Cache-Control is deliberate: consumers honour it, and a long max-age
// would delay their pickup of rotated hub keys.
package mirror

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"crucible.dev/crucible/internal/httperr"
	"crucible.dev/crucible/internal/metrics"
)

// ErrUnavailable means the mirror has no copy of a document it may serve.
var ErrUnavailable = errors.New("no servable document")

// Mirror is the discovery mirror: an http.Handler for its two paths.
type Mirror struct {
	upstream    *http.Client
	upstreamURL string
	now         func() time.Time
	discovery   *cache
	jwks        *cache
}

var _ http.Handler = (*Mirror)(nil)

// New validates opts, reporting every problem at once, and returns a mirror
// with empty caches; the first request fetches from the hub API.
func New(opts Options) (*Mirror, error) {
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("mirror options: %w", err)
	}
	opts = opts.withDefaults()
	m := &Mirror{
		upstream:    noRedirects(opts.Upstream),
		upstreamURL: strings.TrimSuffix(opts.UpstreamURL, "/"),
		now:         opts.Now,
	}
	jwksURI := strings.TrimSuffix(opts.ExternalURL, "/") + jwksPath
	m.discovery = m.newCache(discoveryDocument(jwksURI), opts)
	m.jwks = m.newCache(jwksDocument(), opts)
	return m, nil
}

// noRedirects returns a copy of c that stops at the first redirect and hands
// the 3xx back as the answer, which fetch treats as an upstream failure. The
// hub client adds the controller's token in its transport, so every request
// it sends carries it: following a Location would give the token to any
// host the hub (or something in front of it) names.
func noRedirects(c *http.Client) *http.Client {
	copied := *c
	copied.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &copied
}

// newCache builds the cache of one document and its metric series, so that
// every series exists from the start at zero.
func (m *Mirror) newCache(d document, opts Options) *cache {
	c := &cache{
		doc:      d,
		ttl:      opts.TTL,
		maxStale: opts.MaxStale,
		now:      opts.Now,
		log:      opts.Logger,
		fetch:    m.fetch,
		keeper:   opts.Keeper,
	}
	for _, result := range []string{resultOK, resultError, resultInvalid} {
		metrics.MirrorUpstreamFetches.WithLabelValues(d.name, result)
	}
	for _, src := range []source{sourceFresh, sourceStale, sourceUnavailable} {
		metrics.MirrorResponses.WithLabelValues(d.name, string(src))
	}
	metrics.MirrorDocumentAge.Track(d.name, func() (float64, bool) {
		age, ok := c.age()
		return age.Seconds(), ok
	})
	return c
}

// route returns the cache serving an exact escaped path, nil for any other
// path: no cleaning, no trailing slash, no encoded variants.
func (m *Mirror) route(escapedPath string) *cache {
	switch escapedPath {
	case discoveryPath:
		return m.discovery
	case jwksPath:
		return m.jwks
	}
	return nil
}

// edge answers the mirror's refusals in compact JSON; each carries its
// whole reason, so nothing is logged here (the caches log failed fetches).
var edge = httperr.Edge{Format: httperr.CompactJSON}

// ServeHTTP answers GET and HEAD for the discovery document and the JWKS;
// other paths are 404 and other methods 405.
func (m *Mirror) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	edge.Serve(w, r, m.serve)
}

func (m *Mirror) serve(w http.ResponseWriter, r *http.Request) error {
	c := m.route(r.URL.EscapedPath())
	if c == nil {
		return httperr.New(http.StatusNotFound, "not found")
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return httperr.New(http.StatusMethodNotAllowed, "method not allowed").With("Allow", "GET, HEAD")
	}
	s := c.get(r.Context())
	if r.Context().Err() != nil {
		return nil // the client left; nobody reads an answer
	}
	now := m.now()
	src, freshFor := c.judge(s, now)
	metrics.MirrorResponses.WithLabelValues(c.doc.name, string(src)).Inc()
	if src == sourceUnavailable {
		// Never upstream text: what went wrong upstream is in the log.
		return httperr.New(http.StatusServiceUnavailable, c.doc.name+" temporarily unavailable").
			With("Retry-After", strconv.Itoa(retryAfterSeconds(c.retryAfter(now)))).With("Cache-Control", "no-store")
	}
	w.Header().Set("Cache-Control", cacheControl(src, freshFor))
	httperr.WriteBody(w, r, http.StatusOK, c.doc.contentType, s.body)
	return nil
}

// cacheControl lets consumers keep a fresh copy only for the rest of its TTL,
// and makes them revalidate a stale one, so that they come back for new keys
// as soon as the hub API answers again.
func cacheControl(src source, freshFor time.Duration) string {
	if src != sourceFresh {
		return "no-cache"
	}
	return "public, max-age=" + strconv.Itoa(int(freshFor/time.Second))
}

// retryAfterSeconds rounds up, and never says 0: clients read 0 as "now".
func retryAfterSeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}

// Restore takes the Keeper's documents as the last good copies, for a
// mirror that starts while the hub API is unreachable: served while their
// own fetch time is within TTL plus max_stale, then 503 as any stale copy.
// None kept is no error (a first start); a Keeper that cannot be read is.
// Without a Keeper it does nothing.
func (m *Mirror) Restore(ctx context.Context) error {
	if m.discovery.keeper == nil {
		return nil
	}
	var errs []error
	for _, c := range []*cache{m.discovery, m.jwks} {
		if err := c.restore(ctx); err != nil {
			errs = append(errs, fmt.Errorf("restore %s: %w", c.doc.name, err))
		}
	}
	return errors.Join(errs...)
}

// DocumentStatus is what the mirror knows about one upstream document.
type DocumentStatus struct {
	// LastSuccess is when the good copy was fetched; zero before the first.
	LastSuccess time.Time
	// LastFailure is when the latest fetch failed; zero after a success.
	LastFailure time.Time
	// LastError is why the latest fetch failed; nil after a success. It may
	// hold upstream detail: log it, do not serve it on the external listener.
	LastError error
}

// Status is the mirror's view of both documents.
type Status struct {
	Discovery DocumentStatus
	JWKS      DocumentStatus
}

// Status reports the upstream state of both documents without fetching.
func (m *Mirror) Status() Status {
	return Status{Discovery: m.discovery.status(), JWKS: m.jwks.status()}
}

// Check reports whether both documents can be served now, fetching through
// the caches if needed, for the controller's /readyz. Because fetches are
// shared and back off, probing it costs the hub at most one fetch per
// document per TTL (or per backoff while failing).
func (m *Mirror) Check(ctx context.Context) error {
	var errs []error
	for _, c := range []*cache{m.discovery, m.jwks} {
		s := c.get(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("check mirror: %w", err)
		}
		if src, _ := c.judge(s, m.now()); src == sourceUnavailable {
			errs = append(errs, fmt.Errorf("%s: %w", c.doc.name, ErrUnavailable))
		}
	}
	return errors.Join(errs...)
}

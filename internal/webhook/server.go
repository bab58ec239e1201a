package webhook

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"crucible.dev/crucible/internal/httperr"
	"crucible.dev/crucible/internal/metrics"
)

// Options are a Server's dependencies; the zero value is usable.
type Options struct {
	// Logger receives key fetches at Info or Warn, one line per review
	// (provider, result, reason; never the token) at Debug, and at most one
	// Info line a minute counting refused reviews. Default: slog.Default().
	Logger *slog.Logger

	// State, when set, is where each provider's last fetched keys are
	// persisted, and read back when its key set is created (--state-dir,
	// --state-configmap).
	State StateStore

	// now drives the key-fetch rate limit; tests replace it.
	now func() time.Time
}

// Server answers TokenReviews with the current configuration. The
// configuration sits behind an atomic pointer: Apply swaps it whole, and a
// review in flight finishes with the snapshot it started with.
type Server struct {
	log      *slog.Logger
	now      func() time.Time
	state    StateStore
	refusals *refusals

	current atomic.Pointer[snapshot]
	applyMu sync.Mutex // one Apply at a time
}

// snapshot is one configuration, built.
type snapshot struct {
	cfg       *Config
	providers []*provider // file order, for /readyz
	router    router[*provider]
	verified  *verifiedCache // acceptances of this configuration only
	metrics   reviewMetrics
}

// NewServer builds the authenticators of cfg. It does no I/O: keys are
// fetched on first use, from /readyz, or by Reloader.Start.
func NewServer(ctx context.Context, cfg *Config, opts Options) (*Server, error) {
	s := &Server{log: opts.Logger, now: opts.now, state: opts.State}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.refusals = newRefusals(s.now)
	if err := s.Apply(ctx, cfg); err != nil {
		return nil, err
	}
	return s, nil
}

// Apply builds cfg and makes it current. On error the current configuration
// stays. Key sets whose source (provider name, issuer, discovery URL, CA,
// interval) is unchanged carry over with their keys.
func (s *Server) Apply(ctx context.Context, cfg *Config) error {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	snap, err := s.build(ctx, cfg, s.current.Load())
	if err != nil {
		return err
	}
	s.current.Store(snap)
	return nil
}

// Config returns the configuration being served.
func (s *Server) Config() *Config {
	return s.current.Load().cfg
}

func (s *Server) build(ctx context.Context, cfg *Config, old *snapshot) (*snapshot, error) {
	oldKeys := map[keySource]*keySet{}
	if old != nil {
		for _, p := range old.providers {
			oldKeys[p.keys.src] = p.keys
		}
	}
	snap := &snapshot{cfg: cfg, router: newRouter[*provider](), verified: newVerifiedCache(defaultVerifiedCacheSize, verifiedMaxAge, s.now)}
	for _, pc := range cfg.Providers {
		src := keySource{
			provider:     pc.Name,
			issuer:       pc.JWT.Issuer.URL,
			discoveryURL: discoveryURL(pc),
			ca:           pc.JWT.Issuer.CertificateAuthority,
			minInterval:  cfg.JWKSMinRefreshInterval,
			grace:        pc.UnknownKeyIDGrace,
			maxKeyAge:    pc.MaxKeyAge,
		}
		keys, ok := oldKeys[src]
		if !ok {
			var err error
			if keys, err = newKeySet(ctx, src, s.state, s.now, s.log); err != nil {
				return nil, err
			}
		}
		p, err := buildProvider(ctx, pc, keys)
		if err != nil {
			return nil, err
		}
		snap.providers = append(snap.providers, p)
		snap.router.byIssuer[p.issuer] = p
	}
	snap.metrics = newReviewMetrics(snap.providers)
	return snap, nil
}

// discoveryURL is the configured discovery URL, or the issuer's well-known
// document as in kube-apiserver when none is set.
func discoveryURL(pc ProviderConfig) string {
	if u := pc.JWT.Issuer.DiscoveryURL; u != "" {
		return u
	}
	return strings.TrimRight(pc.JWT.Issuer.URL, "/") + "/.well-known/openid-configuration"
}

// Handler is what the TLS listener kube-apiserver calls serves, and nothing
// else (metrics live on MetricsHandler's listener, so the port that receives
// tokens exposes no operational detail):
//
//	POST /              TokenReview (what --authentication-token-webhook-config-file points at)
//	POST /authenticate  the same, for configurations that name a path
//	GET  /healthz       200 while the process serves
//	GET  /readyz        200 when every provider has keys, else 503; JSON body per provider
func (s *Server) Handler() http.Handler {
	review := s.reviewEdge().Handle(s.serveReview)
	mux := http.NewServeMux()
	mux.Handle("POST /{$}", review)
	mux.Handle("POST /authenticate", review)
	s.handleHealth(mux)
	return mux
}

// MetricsHandler serves the operations listener (--metrics-listen): GET
// /metrics (Prometheus), and /healthz and /readyz as on Handler, for probes
// that cannot present the client certificate the TLS listener requires.
// It never sees a token.
func (s *Server) MetricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", s.withKeyAges(metrics.Handler()))
	s.handleHealth(mux)
	return mux
}

// healthEdge answers a probe's own failure in text, as the webhook refuses.
var healthEdge = httperr.Edge{Format: httperr.Text}

var okBody = []byte("ok\n")

func (s *Server) handleHealth(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		httperr.WriteBody(w, r, http.StatusOK, "text/plain; charset=utf-8", okBody)
	})
	mux.Handle("GET /readyz", healthEdge.Handle(s.serveReady))
}

// Readiness is the /readyz body.
type Readiness struct {
	Ready     bool                `json:"ready"`
	Providers []ProviderReadiness `json:"providers"`
}

// ProviderReadiness says whether one provider has keys, and the latest
// fetch error (a provider can be ready with an error: it keeps old keys).
type ProviderReadiness struct {
	Name  string `json:"name"`
	Ready bool   `json:"ready"`
	// KeySource says where the keys come from when Ready: "fetched" by
	// this process, or "persisted" by an earlier one (its StateStore) and
	// used because fetching fails.
	KeySource string `json:"keySource,omitempty"`
	// KeyAgeSeconds is the time since the keys were fetched, when Ready.
	KeyAgeSeconds *int64 `json:"keyAgeSeconds,omitempty"`
	Error         string `json:"error,omitempty"`
}

// serveReady also fetches keys of providers that have none, within their
// rate limit, so a readiness probe drives the first fetch.
func (s *Server) serveReady(w http.ResponseWriter, r *http.Request) error {
	body := s.Ready(r.Context())
	code := http.StatusOK
	if !body.Ready {
		code = http.StatusServiceUnavailable
	}
	return httperr.WriteJSON(w, r, code, body, httperr.Text)
}

// Ready reports per-provider readiness, fetching the keys of providers that
// have none (within their rate limit).
func (s *Server) Ready(ctx context.Context) Readiness {
	snap := s.current.Load()
	body := Readiness{Ready: true, Providers: []ProviderReadiness{}}
	for _, p := range snap.providers {
		_ = p.keys.Load(ctx) // its error is the status's lastErr
		ready, lastErr := p.keys.Status()
		pr := ProviderReadiness{Name: p.name, Ready: ready}
		if source, age, ok := p.keys.source(); ok {
			secs := int64(age / time.Second)
			pr.KeySource, pr.KeyAgeSeconds = source, &secs
		}
		if lastErr != nil {
			pr.Error = lastErr.Error()
		}
		body.Ready = body.Ready && ready
		body.Providers = append(body.Providers, pr)
	}
	return body
}

// warm fetches the keys of every provider that has none, concurrently, so
// the first review does not wait for it.
func (s *Server) warm(ctx context.Context) {
	var wg sync.WaitGroup
	for _, p := range s.current.Load().providers {
		wg.Go(func() { _ = p.keys.Load(ctx) })
	}
	wg.Wait()
}

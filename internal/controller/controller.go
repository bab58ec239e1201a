// Package controller assembles crucible's hub controller from a profile: the
// store, one federated client per spoke, the dispatcher, the reconciler
// (watch, await, startup reconcile, sweep), the cluster health probes, the
// API's authentication (R-C12), the feed of work-pod changes (package
// events), and the listeners: internal (API, web UI, health, readiness),
// metrics, and external, which
// serves exactly the drop-box and the discovery mirror and 404 for everything
// else — and, on a listener of its own, /metrics.
package controller

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/rest"

	"crucible.dev/crucible/internal/api"
	"crucible.dev/crucible/internal/dispatch"
	"crucible.dev/crucible/internal/events"
	"crucible.dev/crucible/internal/fleet"
	"crucible.dev/crucible/internal/httperr"
	"crucible.dev/crucible/internal/httpserve"
	"crucible.dev/crucible/internal/ingest"
	"crucible.dev/crucible/internal/metrics"
	"crucible.dev/crucible/internal/mirror"
	"crucible.dev/crucible/internal/reconcile"
	"crucible.dev/crucible/internal/retry"
	"crucible.dev/crucible/internal/store"
	"crucible.dev/crucible/internal/ui"
)

// hubRESTConfig builds the controller's client config for its own cluster.
// In a cluster it takes the pod's API address, CA and token path, but reads
// the token through the same file token source as the spoke clients, so a
// 401 after a rotation re-reads the file instead of waiting for the minute.
func hubRESTConfig(h fleet.Hub) (*rest.Config, error) {
	if h.Server != "" {
		return fleet.TokenFileConfig(h.Server, h.CAFile, h.TokenFile)
	}
	in, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("hub: no server configured and not in a cluster: %w", err)
	}
	return fleet.TokenFileConfig(in.Host, in.CAFile, in.BearerTokenFile)
}

// Run serves until ctx ends.
func Run(ctx context.Context, p *fleet.Profile, log *slog.Logger) error {
	hubCfg, err := hubRESTConfig(p.Hub)
	if err != nil {
		return err
	}
	hubHTTP, err := rest.HTTPClientFor(hubCfg)
	if err != nil {
		return fmt.Errorf("hub client: %w", err)
	}
	m, err := mirror.New(mirror.Options{
		Upstream: hubHTTP, UpstreamURL: hubCfg.Host, ExternalURL: p.Controller.ExternalURL,
		TTL: p.Mirror.TTL.Duration, MaxStale: p.Mirror.MaxStale.Duration, Logger: log.With("component", "mirror"),
	})
	if err != nil {
		return fmt.Errorf("discovery mirror: %w", err)
	}
	st, err := store.Open(ctx, p.Controller.Store)
	if err != nil {
		return err
	}
	defer st.Close()
	// Every row change is published to GET /api/events (this replica's
	// writes only; package events).
	bus := events.NewBus()
	st = events.Store{Store: st, Pub: bus}
	clients, err := fleet.NewClients(p.Clusters)
	if err != nil {
		return err
	}
	clients.SetLogger(log.With("component", "fleet"))
	policy := retry.Policy{Initial: 200 * time.Millisecond, Max: p.Reconcile.MaxBackoff.Duration, Budget: p.Reconcile.RetryBudget.Duration}
	d := &dispatch.Dispatcher{Clients: clients, Pods: p.Pods, Instance: p.Controller.Instance, Retry: policy}
	arts, release, err := openArtifacts(ctx, p.Controller, log)
	if err != nil {
		return err
	}
	defer release()
	rec := &reconcile.Reconciler{
		Store: st, Dispatcher: d, Clients: clients, Artifacts: arts, Instance: p.Controller.Instance, Retry: policy,
		SweepInterval: p.Reconcile.SweepInterval.Duration, OrphanGrace: p.Reconcile.OrphanGrace.Duration,
		PendingGrace: dispatchTimeout(p), Log: log.With("component", "reconcile"),
	}
	authn, authz, err := apiAuth(p.API, hubCfg)
	if err != nil {
		return err
	}
	apiSrv := &api.Server{
		Profile: p, Store: st, Dispatcher: d, Clients: clients, Artifacts: arts, Retry: policy, Log: log.With("component", "api"),
		MaxRequestBytes: p.Controller.MaxRequestBytes, DispatchTimeout: dispatchTimeout(p),
		Authn: authn, Authz: authz, AuthMode: p.API.Auth, AllowedHosts: p.API.AllowedHosts, PageSize: p.API.PageSize,
		Events: bus, Settler: rec,
	}

	drop, err := newDropBox(p, st, clients, arts, log.With("component", "ingest"))
	if err != nil {
		return err
	}
	rec.Uploads, apiSrv.Uploads = drop, drop // collecting or cancelling a pod closes its uploads
	// The external listener is the internet-facing route: exactly the
	// drop-box and the mirror (which answers 404 for every other path).
	external := http.NewServeMux()
	external.Handle("/api/pods/{pod}/artifacts/{kind}", drop)
	external.Handle("/", m)

	internal := http.NewServeMux()
	apiSrv.Routes(internal)
	ui.Routes(internal) // the web UI at / and /ui/: embedded, using only the API
	internal.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	internal.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := m.Check(r.Context()); err != nil {
			// The cause names the hub's address: the mirror logs it, the probe
			// gets a fixed reason.
			log.Debug("not ready: the discovery mirror has no document to serve", "error", err)
			httperr.Write(w, r, httperr.Wrap(http.StatusServiceUnavailable, "mirror: no document to serve", err), httperr.Text)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})

	c := p.Controller
	loops := rec.Start // await, log collection, startup reconcile, sweep: once per deployment
	if c.LeaderElect {
		loops = func(ctx context.Context) error {
			return runAsLeader(ctx, hubCfg, p.LeaderElection, log.With("component", "leader"), rec.Start)
		}
	} else {
		metrics.Leader.Set(1)
	}
	runnables := []func(context.Context) error{
		loops,
		func(ctx context.Context) error { return clients.ProbeLoop(ctx, p.Reconcile.HealthInterval.Duration) },
		func(ctx context.Context) error {
			return httpserve.ListenAndServe(ctx, httpserve.Options{Name: "internal", Addr: c.InternalListen,
				CertFile: c.InternalTLSCert, KeyFile: c.InternalTLSKey, InsecureHTTP: c.InternalTLSCert == ""}, internal, log)
		},
		func(ctx context.Context) error {
			return httpserve.ListenAndServe(ctx, httpserve.Options{Name: "external", Addr: c.ExternalListen,
				CertFile: c.ExternalTLSCert, KeyFile: c.ExternalTLSKey, InsecureHTTP: c.ExternalTLSCert == "", WriteTimeout: 5 * time.Minute,
				NoReadTimeout: true}, external, log) // the drop-box enforces a minimum upload rate instead
		},
	}
	if c.MetricsListen != fleet.MetricsListenOff {
		// Metrics on their own listener: the API's listener may face users,
		// and scraping must not need an API identity.
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", metrics.Handler())
		runnables = append(runnables, func(ctx context.Context) error {
			return httpserve.ListenAndServe(ctx, httpserve.Options{Name: "metrics", Addr: c.MetricsListen, InsecureHTTP: true}, mux, log)
		})
	}
	return runAll(ctx, runnables, func() {
		log.Info("controller started", "instance", c.Instance, "clusters", len(p.Clusters), "internal", c.InternalListen, "external", c.ExternalListen,
			"metrics", c.MetricsListen, "auth", p.API.Auth, "leader_elect", c.LeaderElect)
	})
}

// runAll runs every runnable in an errgroup (controller-runtime's
// multicluster example assembles its manager the same way) and calls started
// once they are launched. Any runnable returning, with an error or without,
// stops the rest: a controller with half its loops is worse than one that
// restarts. It returns the first error, after all have returned.
func runAll(ctx context.Context, runnables []func(context.Context) error, started func()) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, ctx := errgroup.WithContext(ctx) // cancelled on the first error
	for _, run := range runnables {
		g.Go(func() error {
			err := run(ctx)
			if err == nil {
				cancel() // errgroup cancels on an error, after recording it first
			}
			return err
		})
	}
	started()
	return g.Wait()
}

// dispatchTimeout bounds one submit's work on the spoke; a pending row
// younger than this may still get its pod from the replica dispatching it.
func dispatchTimeout(p *fleet.Profile) time.Duration {
	return p.Reconcile.RetryBudget.Duration + 30*time.Second
}

// newDropBox builds the drop-box's validator map from the fleet: per cluster
// its shared client, loop namespace, turn service account and ingest audience.
func newDropBox(p *fleet.Profile, st store.Store, clients *fleet.Clients, arts ingest.Blobs, log *slog.Logger) (*ingest.Handler, error) {
	var clusters []ingest.Cluster
	for _, c := range clients.All() {
		clusters = append(clusters, ingest.Cluster{Name: c.Entry.Name, Client: c, Namespace: c.Entry.LoopNamespace,
			ServiceAccount: c.Entry.TurnServiceAccount, Audience: c.Entry.IngestAudience})
	}
	var proxies []netip.Prefix
	for _, cidr := range p.Ingest.TrustedProxies {
		prefix, err := netip.ParsePrefix(cidr)
		if err != nil {
			return nil, fmt.Errorf("ingest.trusted_proxies: %w", err)
		}
		proxies = append(proxies, prefix)
	}
	in := p.Ingest
	h, err := ingest.New(ingest.Options{
		Clusters: clusters, Store: st, Artifacts: arts, MaxBodyBytes: in.MaxBodyBytes,
		AcceptTTL: in.AcceptTTL.Duration, NegativeTTL: in.NegativeTTL.Duration, CacheSize: in.CacheSize,
		RatePerSource: float64(in.RatePerSource), RateBurst: in.RateBurst, TrustedProxies: proxies, Logger: log,
		RatePerPod: float64(in.RatePerPod), RateBurstPerPod: in.RateBurstPerPod,
		MaxKindsPerPod: in.MaxKindsPerPod, MaxBytesPerPod: in.MaxBytesPerPod, MinFreeBytes: in.MinFreeBytes,
		MaxStagingPerPod: in.MaxStagingPerPod, MinUploadRate: in.MinUploadRate, UploadRateWindow: in.UploadRateWindow.Duration,
	})
	if err != nil {
		return nil, fmt.Errorf("drop-box: %w", err)
	}
	return h, nil
}

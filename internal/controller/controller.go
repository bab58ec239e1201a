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
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/rest"

	"crucible.dev/crucible/internal/api"
	"crucible.dev/crucible/internal/capacity"
	"crucible.dev/crucible/internal/dispatch"
	"crucible.dev/crucible/internal/events"
	"crucible.dev/crucible/internal/fleet"
	"crucible.dev/crucible/internal/httperr"
	"crucible.dev/crucible/internal/httpserve"
	"crucible.dev/crucible/internal/ingest"
	"crucible.dev/crucible/internal/inventory"
	"crucible.dev/crucible/internal/metrics"
	"crucible.dev/crucible/internal/mirror"
	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/reconcile"
	"crucible.dev/crucible/internal/shard"
	"crucible.dev/crucible/internal/store"
	"crucible.dev/crucible/internal/ui"
)

// hubRESTConfig builds the controller's client config for its own cluster
// and names its token file. In a cluster it takes the pod's API address, CA
// and token path, but reads the token through the same file token source as
// the spoke clients, so a 401 after a rotation re-reads the file instead of
// waiting for the minute.
func hubRESTConfig(h profile.Hub) (*rest.Config, string, error) {
	if h.Server != "" {
		cfg, err := fleet.TokenFileConfig(h.Server, h.CAFile, h.TokenFile)
		return cfg, h.TokenFile, err
	}
	in, err := rest.InClusterConfig()
	if err != nil {
		return nil, "", fmt.Errorf("hub: no server configured and not in a cluster: %w", err)
	}
	cfg, err := fleet.TokenFileConfig(in.Host, in.CAFile, in.BearerTokenFile)
	return cfg, in.BearerTokenFile, err
}

// clientOptions lets spokes with token_source = "request" (every spoke a
// ClusterProfile makes among them) ask the hub for their tokens as the service account of the hub token in tokenFile; only
// then is the hub token read for its account.
func clientOptions(p *profile.Profile, hubCfg *rest.Config, tokenFile string, log *slog.Logger) ([]fleet.Option, error) {
	if p.Fleet.ClusterProfiles == "" && !slices.ContainsFunc(p.Clusters, func(e profile.ClusterEntry) bool { return e.TokenSource == profile.TokenSourceRequest }) {
		return nil, nil
	}
	_, kube, err := fleet.NewClientset("hub", rest.CopyConfig(hubCfg)) // refuses redirects, as every hub client
	if err != nil {
		return nil, fmt.Errorf("hub client: %w", err)
	}
	acct, err := fleet.NewHubAccount(kube, tokenFile)
	if err != nil {
		return nil, err
	}
	log.Info("spoke tokens come from the hub's TokenRequest API where token_source is request", "namespace", acct.Namespace, "service_account", acct.Name)
	if acct.Pod.Name == "" {
		log.Warn("requested spoke tokens are bound to no pod: the controller's hub token names none (not running in a pod), so a leaked one lives out its lifetime",
			"namespace", acct.Namespace, "service_account", acct.Name)
	} else {
		log.Info("requested spoke tokens are bound to the controller's pod: the hub refuses them once it is deleted", "pod", acct.Pod.Name, "pod_uid", acct.Pod.UID)
	}
	return []fleet.Option{fleet.WithHubAccount(acct)}, nil
}

// Run serves until ctx ends: it assembles the controller's parts from the
// profile, then runs them until the first one returns. With a ProfileSource
// it also reloads the profile when the file changes or on SIGHUP (reload).
func Run(ctx context.Context, p *profile.Profile, log *slog.Logger, src *ProfileSource) error {
	c, err := assemble(ctx, p, log)
	if err != nil {
		return err
	}
	defer c.close()
	rs := c.runnables()
	if src != nil {
		rs = append(rs, reloader{src: src, c: c, log: log.With("component", "reload")})
	}
	return runAll(ctx, rs, func() {
		log.Info("controller started", "instance", p.Controller.Instance, "clusters", len(p.Clusters), "internal", p.Controller.InternalListen,
			"external", p.Controller.ExternalListen, "metrics", p.Controller.MetricsListen, "auth", p.API.Auth, "leader_elect", p.Controller.LeaderElect)
	})
}

// parts is the assembled controller: what its runnables serve and run, and
// what closes when they are done.
type parts struct {
	p        *profile.Profile // as the process started: what only a restart changes
	current  *profile.Current // what a reload changes: the fleet and the pod classes
	log      *slog.Logger
	hubCfg   *rest.Config
	hubToken string // the hub token's file, whose subject TokenRequest spokes ask for
	// requestTokens: the clients may ask the hub for tokens (clientOptions
	// has run with a TokenRequest spoke).
	requestTokens bool
	clients       *fleet.Clients
	// sources are the profile file and the ClusterProfiles the fleet is
	// made of (inventory.go).
	sources fleetSources
	// inventory follows [fleet] cluster_profiles; nil without it.
	inventory *inventory.Watcher
	rec       *reconcile.Reconciler
	drop      *ingest.Handler
	dropMu    sync.Mutex // one validator map at a time: a reload's, a drained spoke's
	spokes    *spokeLoops
	// capacity is the views of the spokes with capacity = true, which
	// placement judges pods against (capacity.go).
	capacity *capacity.Fleet
	// placements counts other replicas' placements against capacity
	// (api.Server.CountPlacements).
	placements placementCounter
	// internal serves the API, the web UI, /healthz and /readyz; external
	// exactly the drop-box and the discovery mirror.
	internal, external http.Handler
	closers            []func() // in the order opened; closed in reverse
}

// assemble builds every part from the profile: the hub client and the
// discovery mirror, the store and its feed of changes, one federated client
// per spoke, the dispatcher, the reconciler, the API and its authentication,
// the drop-box, and the two listeners' handlers. Nothing runs yet.
func assemble(ctx context.Context, p *profile.Profile, log *slog.Logger) (c *parts, err error) {
	if err := checkProxyClientCA(p); err != nil {
		return nil, err
	}
	c = &parts{p: p, current: profile.NewCurrent(p), log: log, sources: fleetSources{file: p}}
	opened := c // every "return nil, err" below sets c to nil before this runs
	defer func() {
		if err != nil {
			opened.close()
		}
	}()
	if c.hubCfg, c.hubToken, err = hubRESTConfig(p.Hub); err != nil {
		return nil, err
	}
	if c.sources.pins, err = loadPins(p.Fleet); err != nil {
		return nil, err
	}
	raw, err := store.Open(ctx, p.Controller.Store)
	if err != nil {
		return nil, err
	}
	c.closers = append(c.closers, func() { raw.Close() })
	m, err := newMirror(ctx, p, c.hubCfg, mirrorKeeper{raw}, log.With("component", "mirror"))
	if err != nil {
		return nil, err
	}
	// Every row change is published to GET /api/events (this replica's
	// writes only; package events).
	bus, err := events.NewBus(p.Events)
	if err != nil {
		return nil, err
	}
	st := events.Store{Store: raw, Pub: bus}
	opts, err := clientOptions(p, c.hubCfg, c.hubToken, log.With("component", "fleet"))
	if err != nil {
		return nil, err
	}
	c.requestTokens = len(opts) > 0
	if c.clients, err = fleet.NewClients(p.Clusters, opts...); err != nil {
		return nil, err
	}
	c.clients.SetLogger(log.With("component", "fleet"))
	policy := fleet.RetryPolicy(p.Reconcile)
	d := &dispatch.Dispatcher{Clients: c.clients, Pods: p.Pods, Instance: p.Controller.Instance, Retry: policy}
	arts, release, err := openArtifacts(ctx, p.Controller, log)
	if err != nil {
		return nil, err
	}
	c.closers = append(c.closers, release)
	c.rec = &reconcile.Reconciler{
		Store: st, Dispatcher: d, Clients: c.clients, Artifacts: arts, Instance: p.Controller.Instance, Retry: policy,
		SweepInterval: p.Reconcile.SweepInterval.Duration, OrphanGrace: p.Reconcile.OrphanGrace.Duration,
		Workers: p.Reconcile.Workers, SweepPage: p.Reconcile.SweepPage,
		PendingGrace: dispatchTimeout(p), Log: log.With("component", "reconcile"),
	}
	authn, authz, err := apiAuth(p, c.hubCfg, log.With("component", "api"))
	if err != nil {
		return nil, err
	}
	if c.drop, err = newDropBox(p, st, c.clients, arts, log.With("component", "ingest")); err != nil {
		return nil, err
	}
	c.rec.Uploads = c.drop // collecting or cancelling a pod closes its uploads
	c.spokes = newSpokeLoops(c.rec, c.clients, p.Reconcile.DrainTimeout.Duration, c.syncDropBox, log.With("component", "reconcile"))
	c.capacity = capacity.NewFleet(log.With("component", "capacity"))
	apiSrv := api.New(api.Options{
		Profile: c.current, Store: st, Dispatcher: d, Clients: c.clients, Artifacts: arts, Retry: policy, Log: log.With("component", "api"),
		MaxRequestBytes: p.Controller.MaxRequestBytes, DispatchTimeout: dispatchTimeout(p),
		Authn: authn, Authz: authz, AuthMode: p.API.Auth, AllowedHosts: p.API.AllowedHosts, PageSize: p.API.PageSize,
		Events: bus, Settler: c.rec, Dispatches: c.rec, Uploads: c.drop, Owners: c.spokes.Owners, Capacity: c.capacity,
		CapacityHistory: c.capacity,
	})
	c.rec.Placer = apiSrv // a spilled pod is placed again as a submit is
	c.placements = apiSrv
	if p.Fleet.ClusterProfiles != "" {
		if c.inventory, err = inventoryWatcher(c); err != nil {
			return nil, err
		}
	}
	c.external = externalHandler(c.drop, m)
	c.internal = internalHandler(apiSrv, m, log)
	return c, nil
}

// close releases what assemble opened, last first.
func (c *parts) close() {
	for i := len(c.closers) - 1; i >= 0; i-- {
		c.closers[i]()
	}
}

// newMirror is the discovery mirror: the hub's OIDC documents, fetched with
// the controller's own hub identity.
func newMirror(ctx context.Context, p *profile.Profile, hubCfg *rest.Config, keeper mirror.Keeper, log *slog.Logger) (*mirror.Mirror, error) {
	hubHTTP, err := rest.HTTPClientFor(hubCfg)
	if err != nil {
		return nil, fmt.Errorf("hub client: %w", err)
	}
	m, err := mirror.New(mirror.Options{
		Upstream: hubHTTP, UpstreamURL: hubCfg.Host, ExternalURL: p.Controller.ExternalURL,
		TTL: p.Mirror.TTL.Duration, MaxStale: p.Mirror.MaxStale.Duration, Logger: log, Keeper: keeper,
	})
	if err != nil {
		return nil, fmt.Errorf("discovery mirror: %w", err)
	}
	// The documents the store kept, served while the hub API does not
	// answer this process yet (R-TB1); a fetch replaces them.
	if err := m.Restore(ctx); err != nil {
		return nil, fmt.Errorf("discovery mirror: %w", err)
	}
	return m, nil
}

// mirrorKeeper is the store as the mirror's Keeper: none kept is a nil
// document, not an error.
type mirrorKeeper struct{ store.Store }

func (k mirrorKeeper) MirrorDocument(ctx context.Context, name string) ([]byte, time.Time, error) {
	body, at, err := k.Store.MirrorDocument(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, time.Time{}, nil
	}
	return body, at, err
}

// externalHandler is the internet-facing route: exactly the drop-box and
// the mirror (which answers 404 for every other path).
func externalHandler(drop http.Handler, m http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/api/pods/{pod}/artifacts/{kind}", drop)
	mux.Handle("/", m)
	return mux
}

// internalHandler serves the API, the web UI, /healthz and /readyz, which
// is ready once the mirror has a document it may serve.
func internalHandler(apiSrv *api.Server, m *mirror.Mirror, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	apiSrv.Routes(mux)
	ui.Routes(mux) // the web UI at / and /ui/: embedded, using only the API
	ok := func(w http.ResponseWriter, r *http.Request) {
		httperr.WriteBody(w, r, http.StatusOK, "text/plain; charset=utf-8", []byte("ok\n"))
	}
	mux.HandleFunc("GET /healthz", ok)
	// The cause names the hub's address: the mirror logs it, the probe gets
	// a fixed reason.
	probe := httperr.Edge{Format: httperr.Text, Log: func(_ *http.Request, he *httperr.Error, _ error) {
		log.Debug("not ready: the discovery mirror has no document to serve", "error", he.Err)
	}}
	mux.Handle("GET /readyz", probe.Handle(func(w http.ResponseWriter, r *http.Request) error {
		if err := m.Check(r.Context()); err != nil {
			return httperr.Wrap(http.StatusServiceUnavailable, "mirror: no document to serve", err)
		}
		ok(w, r)
		return nil
	}))
	return mux
}

// runnable is one of the controller's long-running parts.
type runnable interface {
	Start(ctx context.Context) error
}

var (
	_ runnable = loops{}
	_ runnable = probes{}
	_ runnable = listener{}
)

// runnables are the parts that run: the reconciler's loops, the health
// probes and the listeners (internal, external, and metrics unless off).
func (c *parts) runnables() []runnable {
	ctl := c.p.Controller
	rs := []runnable{
		loops{spokes: c.spokes, elect: ctl.LeaderElect, hub: c.hubCfg, election: c.p.LeaderElection, log: c.log.With("component", "leader")},
		probes{clients: c.clients, every: c.p.Reconcile.HealthInterval.Duration},
		capacityViews{c},
		listener{log: c.log, handler: c.internal, opts: httpserve.Options{Name: "internal", Addr: ctl.InternalListen,
			CertFile: ctl.InternalTLSCert, KeyFile: ctl.InternalTLSKey, InsecureHTTP: ctl.InternalTLSCert == "",
			AskClientCAFile: c.p.API.ProxyClientCA, ClientNames: c.p.API.ProxyClientNames}}, // the SSO proxy's proof (apiauth.Proxy)
		listener{log: c.log, handler: c.external, opts: httpserve.Options{Name: "external", Addr: ctl.ExternalListen,
			CertFile: ctl.ExternalTLSCert, KeyFile: ctl.ExternalTLSKey, InsecureHTTP: ctl.ExternalTLSCert == "", WriteTimeout: 5 * time.Minute,
			NoReadTimeout: true}}, // the drop-box enforces a minimum upload rate instead
	}
	if ctl.MetricsListen != profile.MetricsListenOff {
		rs = append(rs, metricsListener(ctl, c.log))
	}
	if c.inventory != nil {
		rs = append(rs, c.inventory)
	}
	return rs
}

// MetricsAllowedHostsKey is the profile key that lists the names the
// metrics listener and the profiler answer to, named in their refusals.
const MetricsAllowedHostsKey = "controller.metrics_allowed_hosts"

// metricsListener serves /metrics on a listener of its own: the API's
// listener may face users, and scraping must not need an API identity.
// Without one, the Host allowlist is what keeps a page that rebinds its
// name to this address from reading it through an admin's browser.
func metricsListener(ctl profile.Controller, log *slog.Logger) listener {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics.Handler())
	return listener{log: log, handler: httpserve.RequireHost(ctl.MetricsAllowedHosts, MetricsAllowedHostsKey, mux),
		opts: httpserve.Options{Name: "metrics", Addr: ctl.MetricsListen, InsecureHTTP: true}}
}

// loops runs the reconciler (await, log collection, startup reconcile,
// sweep) of every spoke once per deployment: here; with leader election
// each spoke's on the replica holding that spoke's Lease; or, with
// single_leader, all of them while this replica holds the one Lease.
type loops struct {
	spokes   *spokeLoops
	elect    bool
	hub      *rest.Config
	election profile.LeaderElection
	log      *slog.Logger
}

func (l loops) Start(ctx context.Context) error {
	switch {
	case !l.elect:
		metrics.Leader.Set(1)
		return l.spokes.run(ctx)
	case l.election.SingleLeader:
		return l.followThenLead(ctx)
	}
	a, err := newAssigner(l.hub, l.election, l.log)
	if err != nil {
		return err
	}
	// A removed spoke drains on the replica holding its Lease; the others
	// forget it when that drain has ended, as a follower does.
	defer l.spokes.startForgetting(ctx)()
	return l.spokes.runSharded(ctx, a)
}

// followThenLead runs, while this replica follows, the follower's part of
// a removed spoke's drain (spokeLoops.forgetDrained), and once it leads,
// every spoke's loops instead.
func (l loops) followThenLead(ctx context.Context) error {
	stopFollowing := l.spokes.startForgetting(ctx)
	defer stopFollowing()
	return runAsLeader(ctx, l.hub, l.election, l.log, func(lctx context.Context) error {
		stopFollowing()
		return l.spokes.run(lctx)
	})
}

// leaseClientSpokes is how many spokes one replica's lease client renews
// without its rate limit holding a renewal back: a fleet ten times the
// hundred spokes measured (TestHundredSpokes, make fleet), all on one
// replica.
const leaseClientSpokes = 1000

// newAssigner shares the spokes out over the replicas through a Lease
// per spoke on the hub, with [leader_election]'s durations.
func newAssigner(hub *rest.Config, le profile.LeaderElection, log *slog.Logger) (*shard.Assigner, error) {
	cfg := rest.CopyConfig(hub)
	// A renewal held back by the client's rate limiter counts against
	// renew_deadline: every held spoke renews each retry_period, so a limit
	// below (spokes held + 2) per retry_period makes the queue grow until
	// every lease lapses. Sized for leaseClientSpokes on one replica.
	cfg.QPS = float32(leaseClientSpokes+2) / float32(le.RetryPeriod.Seconds())
	cfg.Burst = 2 * (leaseClientSpokes + 2)
	_, kube, err := fleet.NewClientset("hub", cfg) // refuses redirects, as every hub client
	if err != nil {
		return nil, fmt.Errorf("spoke lease client: %w", err)
	}
	return shard.New(shard.Options{
		Kube: kube, Namespace: le.LeaseNamespace, Prefix: le.LeaseName, Identity: leaderIdentity(),
		LeaseDuration: le.LeaseDuration.Duration, RenewDeadline: le.RenewDeadline.Duration, RetryPeriod: le.RetryPeriod.Duration, Log: log,
	})
}

// probes keeps every cluster's health current.
type probes struct {
	clients *fleet.Clients
	every   time.Duration
}

func (p probes) Start(ctx context.Context) error { return p.clients.ProbeLoop(ctx, p.every) }

// listener serves one listener until ctx ends.
type listener struct {
	opts    httpserve.Options
	handler http.Handler
	log     *slog.Logger
}

func (l listener) Start(ctx context.Context) error {
	return httpserve.ListenAndServe(ctx, l.opts, l.handler, l.log)
}

// runAll runs every runnable in an errgroup (controller-runtime's
// multicluster example assembles its manager the same way) and calls started
// once they are launched. Any runnable returning, with an error or without,
// stops the rest: a controller with half its loops is worse than one that
// restarts. It returns the first error, after all have returned.
func runAll(ctx context.Context, runnables []runnable, started func()) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, ctx := errgroup.WithContext(ctx) // cancelled on the first error
	for _, r := range runnables {
		g.Go(func() error {
			err := r.Start(ctx)
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
func dispatchTimeout(p *profile.Profile) time.Duration {
	return p.Reconcile.RetryBudget.Duration + 30*time.Second
}

// newDropBox builds the drop-box from the profile's [ingest] section and
// the fleet's validator map (validators).
func newDropBox(p *profile.Profile, st store.Store, clients *fleet.Clients, arts ingest.Blobs, log *slog.Logger) (*ingest.Handler, error) {
	h, err := ingest.New(ingest.Options{Clusters: validators(clients), Store: st, Artifacts: arts, Ingest: p.Ingest, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("drop-box: %w", err)
	}
	return h, nil
}

// validators is the drop-box's validator map: per cluster, draining ones
// included (their pods still upload), its shared client, loop namespace,
// turn service account and ingest audience.
func validators(clients *fleet.Clients) []ingest.Cluster {
	var clusters []ingest.Cluster
	for _, c := range clients.All() {
		clusters = append(clusters, ingest.Cluster{Name: c.Entry.Name, Client: c, Namespace: c.Entry.LoopNamespace,
			ServiceAccount: c.Entry.TurnServiceAccount, Audience: c.Entry.IngestAudience})
	}
	return clusters
}

// syncDropBox gives the drop-box the fleet's validator map as it is now.
func (c *parts) syncDropBox() {
	c.dropMu.Lock()
	defer c.dropMu.Unlock()
	if err := c.drop.SetClusters(validators(c.clients)); err != nil {
		c.log.Error("drop-box keeps its validators", "error", err) // the profile's validation rules this out
	}
}

// Package api serves the controller's JSON API on the internal listener
// (R-C9): submit a work pod to a cluster, list/filter/get, cancel, artifacts,
// clusters with health. Every request passes the guard (auth.go) first: Host
// allowlist, CSRF and JSON-only checks, authentication and authorization
// (R-C12). Every error is an httperr.Error answered as JSON naming the bad
// field: its public message goes to the client, its cause only to the log.
// The store, the spokes and the drop-box are small interfaces (deps.go), so
// every refusal is unit-tested with fakes; New fills what a caller leaves
// out with a default once. What goes over the wire is package apiv1's.
package api

import (
	"context"
	"crypto/rand"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"crucible.dev/crucible/internal/apiauth"
	podevents "crucible.dev/crucible/internal/events"
	"crucible.dev/crucible/internal/fleet"
	"crucible.dev/crucible/internal/httperr"
	"crucible.dev/crucible/internal/ingest"
	"crucible.dev/crucible/internal/live"
	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/retry"
	"crucible.dev/crucible/internal/store"
)

// Options are what the API serves with. New fills every field left zero
// that has a default, so handlers use each as it is.
type Options struct {
	// Profile is the profile in force, swapped by a reload: a handler
	// reads it once (profile) and decides with that one. Default: fleet's
	// defaults and no clusters (tests, benches).
	Profile *profile.Current
	// Owners, with leader election, names the replica running each
	// cluster's loops (GET /api/clusters). Default: nobody.
	Owners func() map[string]string
	// Store, Dispatcher, Clients, Artifacts and Uploads are what the API
	// uses of the store, the spokes and the drop-box, each as a small
	// interface (deps.go), so handlers are unit-tested with fakes.
	Store      Store
	Dispatcher Dispatcher
	Clients    Clusters // default: no clusters
	Artifacts  ArtifactReader
	Uploads    ingest.Uploads // told when a pod is cancelled (default: nobody)
	// Settler records how a pod whose live log ended is doing (default: the
	// row as the store has it).
	Settler Settler
	// Dispatches is told of each dispatch in flight (default: nobody).
	Dispatches Dispatches
	// Retry bounds reconnecting a live log stream after transient spoke
	// errors. Default: the profile's [reconcile] policy.
	Retry retry.Policy
	Log   *slog.Logger // default: slog.Default()
	// MaxRequestBytes bounds request bodies (413 beyond).
	MaxRequestBytes int64
	// DispatchTimeout bounds one submit's work on the spoke.
	DispatchTimeout time.Duration
	// Authn and Authz decide who may call. Default: anonymous and allow
	// all (auth "none").
	Authn Authenticator
	Authz Authorizer
	// AuthMode is the profile's [api] auth, shown by GET /api/whoami.
	AuthMode string
	// AllowedHosts are the Host names (any port) the API answers.
	AllowedHosts []string
	// PageSize is GET /api/pods's page without ?limit (and at most
	// profile.MaxAPIPageSize with it).
	PageSize int
	// Live shares pods' live log streams. Default: one over Dispatcher and
	// Clients with the profile's [live] section (logs.go).
	Live *live.Hub
	// Events feeds GET /api/events; the controller publishes every row
	// change into it (events.Store). Default: a bus nobody publishes to,
	// bounded by the profile's [events] section.
	Events *podevents.Bus
	// Forwarder opens run-live sessions on spokes (portforward.go).
	// Default: through Clients, each cluster's one shared client.
	Forwarder PortForwarder
	// Capacity is the spokes' capacity views, for placement and GET
	// /api/capacity (placement.go). Default: none, placement by profile
	// order.
	Capacity Capacity
	// CapacityHistory is the spokes' GPU occupancy over the last hour, for GET
	// /api/capacity/history (capacity.go). Default: none.
	CapacityHistory CapacityHistory
}

// Server serves the API with its Options, defaults filled by New.
type Server struct {
	Options
	// liveErr and eventsErr say why the profile's [live] or [events]
	// section could make no default Live or Events: the endpoints that
	// need one answer it, the others serve.
	liveErr, eventsErr error
	settling           singleflight.Group // one Settle per pod however many viewers end
	// digest is the store's digest key once read (digestKey).
	digest   []byte
	digestMu sync.Mutex
	// placing makes a placement's judging, deciding and reserving one
	// step (placement.go).
	placing sync.Mutex
	// counted are the placed rows whose pods count against the views
	// until the time given: this replica's own placements, and the ones
	// CountPlacements read (peers.go).
	counted   map[string]time.Time
	countedMu sync.Mutex
	// budgets counts live-log and event streams against [live]'s and
	// [events]' caps (budget.go).
	budgets budgets
}

// New returns a server of o, every zero field with a default filled.
func New(o Options) *Server {
	s := &Server{Options: o, counted: map[string]time.Time{}}
	if s.Profile == nil {
		def := profile.Default()
		s.Profile = profile.NewCurrent(&def)
	}
	if s.Owners == nil {
		s.Owners = func() map[string]string { return nil }
	}
	if s.Clients == nil {
		s.Clients = noClusters{}
	}
	if s.Uploads == nil {
		s.Uploads = ingest.NoUploads{}
	}
	if s.Settler == nil {
		s.Settler = storeSettler{Store: s.Store}
	}
	if s.Dispatches == nil {
		s.Dispatches = noDispatches{}
	}
	if s.Log == nil {
		s.Log = slog.Default()
	}
	if s.Authn == nil {
		s.Authn = apiauth.Anonymous{}
	}
	if s.Authz == nil {
		s.Authz = apiauth.AllowAll{}
	}
	if s.Capacity == nil {
		s.Capacity = noCapacity{}
	}
	if s.CapacityHistory == nil {
		s.CapacityHistory = noHistory{}
	}
	if s.Forwarder == nil {
		s.Forwarder = fleetForwarder{clients: s.Clients}
	}
	if s.Retry == (retry.Policy{}) {
		s.Retry = fleet.RetryPolicy(s.profile().Reconcile)
	}
	if s.Live == nil {
		s.Live, s.liveErr = s.newLiveHub()
	}
	if s.Events == nil {
		s.Events, s.eventsErr = podevents.NewBus(s.profile().Events)
	}
	return s
}

// Routes registers the API on mux.
func (s *Server) Routes(mux *http.ServeMux) {
	mux.Handle("POST /api/pods", s.handle(s.submit))
	mux.Handle("GET /api/pods", s.handle(s.list))
	mux.Handle("GET /api/pods/{pod}", s.handle(s.get))
	mux.Handle("POST /api/pods/{pod}/cancel", s.handle(s.cancel))
	mux.Handle("GET /api/pods/{pod}/logs", s.handle(s.logs))
	mux.Handle("GET /api/pods/{pod}/artifacts", s.handle(s.listArtifacts))
	mux.Handle("GET /api/pods/{pod}/artifacts/{kind}", s.handle(s.getArtifact))
	mux.Handle("GET /api/pods/{pod}/portforward", s.handle(s.portForward))
	mux.Handle("GET /api/pods/{pod}/run-live", s.handle(s.runLive))
	mux.Handle("GET /api/clusters", s.handle(s.clusters))
	mux.Handle("GET /api/capacity", s.handle(s.capacityView))
	mux.Handle("GET /api/capacity/history", s.handle(s.capacityHistory))
	mux.Handle("GET /api/classes", s.handle(s.classes))
	mux.Handle("GET /api/events", s.handle(s.watchEvents))
	mux.Handle("GET /api/whoami", s.handle(s.whoami))
	mux.Handle("/api/", s.handle(func(w http.ResponseWriter, r *http.Request) error {
		return httperr.New(http.StatusNotFound, "no such endpoint: "+r.Method+" "+httperr.Truncate(r.URL.Path, 200))
	}))
}

// handle serves fn at the API's edge: behind the guard (auth.go), every
// error answered as JSON naming the bad field.
func (s *Server) handle(fn httperr.HandlerFunc) http.Handler {
	return s.edge().Handle(fn)
}

// edge answers the public message of every error as JSON (httperr.JSON);
// a store outage is a 503, and a 503 always says when to retry and a 401
// how to authenticate. The cause of a 5xx is logged, and every
// state-changing request with the caller's identity and its status.
func (s *Server) edge() httperr.Edge {
	return httperr.Edge{
		Format:     httperr.JSON,
		Guard:      s.guard,
		Classify:   classify,
		RetryAfter: retryAfterSeconds,
		Challenge:  `Bearer realm="crucible"`,
		Log: func(r *http.Request, he *httperr.Error, err error) {
			if he.Code >= 500 {
				s.Log.Error("api request failed", "method", r.Method, "path", r.URL.Path, "code", he.Code, "error", err)
			}
		},
		Done: func(r *http.Request, code int, _ *httperr.Error) {
			if stateChanging(r.Method) {
				s.Log.Info("api change", "method", r.Method, "path", r.URL.Path, "user", identity(r).User, "code", code)
			}
		},
	}
}

// classify answers an error no handler classified: the database restarting
// or out of connections is transient, anything else a fixed 500.
func classify(err error) *httperr.Error {
	if store.IsUnavailable(err) {
		return httperr.Wrap(http.StatusServiceUnavailable, "the store is unavailable; retry later", err)
	}
	return nil
}

// writeJSON answers v indented (httperr.JSON). The API's views are plain
// structs, which always encode; one that did not would get the fixed 500.
func writeJSON(w http.ResponseWriter, code int, v any) {
	if err := httperr.WriteJSON(w, nil, code, v, httperr.JSON); err != nil {
		httperr.Edge{Format: httperr.JSON}.Fail(w, nil, err)
	}
}

// newID makes a work pod's id, which is also its pod's name on the spoke.
func newID(kind string) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 10)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return kind + "-" + string(b)
}

func notFound(what string) error {
	return httperr.New(http.StatusNotFound, what+" not found")
}

func detach(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), d)
}

// profile is the profile in force.
func (s *Server) profile() *profile.Profile { return s.Profile.Load() }

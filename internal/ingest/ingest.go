// Package ingest owns the drop-box (R-IN): the internet-facing route
// POST /api/pods/{pod}/artifacts/{kind} through which a work pod pushes a
// result file, authenticated by its projected service-account token.
//
// Every way in is closed before the body is read: method, path and names,
// a per-source rate limit (spent by failed authentication), a local
// pre-check of the token against the clusters' signing keys (which can only
// reject, and names the clusters whose keys signed it), the pod's row —
// whose cluster must be one of those, so a token is never sent to another
// cluster's TokenReview — a TokenReview on the pod's cluster, whose answer
// must name exactly that pod (name and uid) and the cluster's turn service
// account, and a per-pod rate limit. Accepts and rejections are cached,
// identical reviews coalesced, so neither a flood of forged tokens nor a
// flood of one rejected token reaches the spokes. A spoke that cannot
// answer — its keys missing or failing while the token may be its own, or
// a TokenReview with status.error — yields 503, never a cached "no".
//
// A work pod runs user code, so even an authenticated pod is held to rules
// (save.go): kinds the controller owns are refused, uploads stop once the
// row is cancelled, lost or collected, quotas bound what a pod stores, and
// an upload is staged only when it fits. Artifacts are content-addressed
// files; the store's record is the claim, so of two uploads of different
// bytes exactly one is recorded and the bytes served are always the
// recorded ones. A crash between a file's rename and its record leaves a
// file nobody names, never a record without its bytes.
package ingest

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"crucible.dev/crucible/internal/fleet"
	"crucible.dev/crucible/internal/jwt"
	"crucible.dev/crucible/internal/lru"
	"crucible.dev/crucible/internal/store"
)

// Cluster is one entry of the validator map (R-IN2), keyed by Name.
type Cluster struct {
	Name string
	// Client is the cluster's shared federated client: TokenReviews go
	// through Client.Kube, the JWKS through Client.HTTP and
	// Client.Entry.Server.
	Client *fleet.Client
	// Namespace is the expected pod namespace (the cluster's loop namespace).
	Namespace string
	// ServiceAccount is the expected service account (the turn service account).
	ServiceAccount string
	// Audience is the ingest audience the pods' tokens carry.
	Audience string
}

// Options configures a Handler. Zero values take the defaults noted.
type Options struct {
	Clusters []Cluster
	Store    store.Store
	// Artifacts is where the bytes go: an artifact.Dir with SQLite, the
	// database (pgblob) with PostgreSQL, so every replica serves them.
	Artifacts Blobs
	// MaxBodyBytes bounds an artifact (default 64 MiB); beyond: 413.
	MaxBodyBytes int64
	// AcceptTTL bounds accept-cache entries (default 5m); an entry never
	// outlives its token's exp.
	AcceptTTL time.Duration
	// NegativeTTL is how long a rejection is remembered (default 10s).
	NegativeTTL time.Duration
	// CacheSize bounds each cache and the limiter map (default 10000).
	CacheSize int
	// RatePerSource is the requests/s allowed per client address (default
	// 20) with burst RateBurst (default 40); beyond: 429 with Retry-After.
	// A request that authenticates gets its token back, so the bucket is
	// spent by failed authentication: pods of a spoke behind one egress
	// address do not throttle each other. IPv6 clients share a bucket per
	// /64, the smallest block one client is routinely given.
	RatePerSource float64
	RateBurst     int
	// RatePerPod is the requests/s allowed per authenticated pod (default
	// 10) with burst RateBurstPerPod (default 20); beyond: 429 with
	// Retry-After.
	RatePerPod      float64
	RateBurstPerPod int
	// TrustedProxies are the peers whose X-Forwarded-For is honoured.
	TrustedProxies []netip.Prefix
	// JWKSMinRefresh is the least time between JWKS fetches of a cluster
	// caused by unknown key ids (default 10s).
	JWKSMinRefresh time.Duration

	// Quotas and pacing of uploads (R-IN7); see save.go. MaxKindsPerPod
	// (default 32) and MaxBytesPerPod (default 1 GiB) bound what one pod
	// may upload, beyond: 413. MinFreeBytes (default 1 GiB) is the space
	// the artifact volume keeps free, below: 507 with Retry-After.
	// MinFreeBytes applies only to Artifacts with a FreeBytes method (the
	// directory); a database watches its own volume.
	// MaxStagingPerPod (default 2) bounds a pod's uploads being written at
	// once, beyond: 429. A body slower than MinUploadRate bytes/s (default
	// 4 KiB/s) over any UploadRateWindow (default 30s) is cut with 408.
	MaxKindsPerPod   int
	MaxBytesPerPod   int64
	MinFreeBytes     int64
	MaxStagingPerPod int
	MinUploadRate    int64
	UploadRateWindow time.Duration
	// freeBytes reports the artifact volume's free space (default: the
	// Artifacts' FreeBytes, if it has one; nil: no floor); tests replace it.
	freeBytes func() (uint64, error)
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger receives the handler's logs (default: discarded).
	Logger *slog.Logger

	// insecureSkipAuth skips the token checks (steps 1, 2, 4 and 5; the
	// pod's row is still required). Only tests in this package set it, to
	// measure what authentication costs.
	insecureSkipAuth bool
	// reviewTimeout bounds one TokenReview (default 10s).
	reviewTimeout time.Duration
}

// Defaults of the zero Options that are not profile settings; those that
// are (body size, caches, rates, quotas) are package fleet's, the one home of
// the profile's defaults.
const (
	DefaultJWKSMinRefresh = 10 * time.Second
	defaultReviewTimeout  = 10 * time.Second
)

func (o *Options) setDefaults() {
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = fleet.DefaultIngestMaxBodyBytes
	}
	if o.AcceptTTL == 0 {
		o.AcceptTTL = fleet.DefaultIngestAcceptTTL
	}
	if o.NegativeTTL == 0 {
		o.NegativeTTL = fleet.DefaultIngestNegativeTTL
	}
	if o.CacheSize == 0 {
		o.CacheSize = fleet.DefaultIngestCacheSize
	}
	if o.RatePerSource == 0 {
		o.RatePerSource = fleet.DefaultIngestRatePerSource
	}
	if o.RateBurst == 0 {
		o.RateBurst = fleet.DefaultIngestRateBurst
	}
	if o.RatePerPod == 0 {
		o.RatePerPod = fleet.DefaultIngestRatePerPod
	}
	if o.RateBurstPerPod == 0 {
		o.RateBurstPerPod = fleet.DefaultIngestRateBurstPod
	}
	if o.JWKSMinRefresh == 0 {
		o.JWKSMinRefresh = DefaultJWKSMinRefresh
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.reviewTimeout == 0 {
		o.reviewTimeout = defaultReviewTimeout
	}
	o.setUploadDefaults()
}

// validate reports every problem at once.
func (o *Options) validate() error {
	var errs []error
	if len(o.Clusters) == 0 {
		errs = append(errs, errors.New("clusters: none"))
	}
	seen := map[string]bool{}
	for i, c := range o.Clusters {
		at := fmt.Sprintf("clusters[%d]", i)
		switch {
		case c.Name == "":
			errs = append(errs, fmt.Errorf("%s.name: empty", at))
		case seen[c.Name]:
			errs = append(errs, fmt.Errorf("%s.name: %q defined twice", at, c.Name))
		}
		seen[c.Name] = true
		if c.Client == nil || c.Client.Kube == nil || c.Client.HTTP == nil {
			errs = append(errs, fmt.Errorf("%s.client: missing", at))
		}
		for _, f := range []struct{ name, v string }{{"namespace", c.Namespace}, {"serviceAccount", c.ServiceAccount}, {"audience", c.Audience}} {
			if f.v == "" {
				errs = append(errs, fmt.Errorf("%s.%s: empty", at, f.name))
			}
		}
	}
	if o.Store == nil {
		errs = append(errs, errors.New("store: missing"))
	}
	if o.Artifacts == nil {
		errs = append(errs, errors.New("artifacts: missing"))
	}
	// A slice, not a map: the errors come out in the same order every run.
	for _, f := range []struct {
		name     string
		negative bool
	}{
		{"maxBodyBytes", o.MaxBodyBytes < 0},
		{"acceptTTL", o.AcceptTTL < 0},
		{"negativeTTL", o.NegativeTTL < 0},
		{"cacheSize", o.CacheSize < 0},
		{"ratePerSource", o.RatePerSource < 0},
		{"rateBurst", o.RateBurst < 0},
		{"jwksMinRefresh", o.JWKSMinRefresh < 0},
		{"ratePerPod", o.RatePerPod < 0},
		{"rateBurstPerPod", o.RateBurstPerPod < 0},
		{"maxKindsPerPod", o.MaxKindsPerPod < 0},
		{"maxBytesPerPod", o.MaxBytesPerPod < 0},
		{"minFreeBytes", o.MinFreeBytes < 0},
		{"maxStagingPerPod", o.MaxStagingPerPod < 0},
		{"minUploadRate", o.MinUploadRate < 0},
		{"uploadRateWindow", o.UploadRateWindow < 0},
	} {
		if f.negative {
			errs = append(errs, fmt.Errorf("%s: negative", f.name))
		}
	}

	return errors.Join(errs...)
}

// Handler serves the drop-box. The controller mounts it on its external mux
// for "/api/pods/".
type Handler struct {
	opts     Options
	log      *slog.Logger
	clusters map[string]*cluster
	order    []*cluster // as configured: the pre-check's candidates

	accept      *lru.Cache[acceptEntry]
	negative    *lru.Cache[struct{}]
	limiters    *lru.Cache[limiter] // per source
	podLimiters *lru.Cache[limiter] // per authenticated pod
	flights     flights
	locks       keyedMutex
	staging     podSlots

	reviewTimeout time.Duration
}

// cluster is a validator map entry with its key set.
type cluster struct {
	Cluster
	keys *jwt.KeySet
}

// New validates opts, fills in defaults and builds the handler. It does no
// I/O: each cluster's keys are fetched on first need.
func New(opts Options) (*Handler, error) {
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("ingest options: %w", err)
	}
	opts.setDefaults()
	h := &Handler{
		opts:          opts,
		log:           opts.Logger,
		clusters:      make(map[string]*cluster, len(opts.Clusters)),
		accept:        lru.New[acceptEntry](opts.CacheSize),
		negative:      lru.New[struct{}](opts.CacheSize),
		limiters:      lru.New[limiter](opts.CacheSize),
		podLimiters:   lru.New[limiter](opts.CacheSize),
		reviewTimeout: opts.reviewTimeout,
	}
	for _, c := range opts.Clusters {
		cl := &cluster{Cluster: c, keys: newKeySet(c.Client, opts.JWKSMinRefresh, opts.Now, opts.Logger)}
		h.clusters[c.Name] = cl
		h.order = append(h.order, cl)
	}
	return h, nil
}

// Package ingest owns the drop-box (R-IN): the internet-facing route
// POST /api/pods/{pod}/artifacts/{kind} through which a work pod pushes a
// result file, authenticated by its projected service-account token.
//
// Every way in is closed before the body is read: method, path and names,
// a local pre-check of the token against the clusters' signing keys (which
// can only reject, and names the clusters whose keys signed it), the pod
// the token is bound to, which must be the request's — so a pod's token
// replayed against other pods never reaches the store — then the pod's
// row (unknown ids negatively cached; a token or pod uid refused after
// reading it budgeted, replay.go) — whose cluster must be one of those, so a token is never sent to
// another cluster's TokenReview — the token's issuer and bound pod uid
// against the cluster's issuer and the row's uid, a TokenReview on the
// pod's cluster, whose answer must name exactly that pod (name and uid) and
// the cluster's turn service account, and a per-pod rate limit. A failed
// request is charged to its source; one whose token no cluster signed is
// answered 429 once its source's bucket is empty, while a signed one is
// never refused by it, so garbage sent through a shared address (an
// ingress) never delays a pod. Accepts and rejections are cached,
// identical reviews coalesced, so neither a flood of forged tokens nor a
// flood of one rejected token reaches the spokes. A spoke that cannot
// answer — its keys missing or failing while the token may be its own, or
// a TokenReview with status.error — yields 503, never a cached "no".
//
// A work pod runs user code, so even an authenticated pod is held to rules
// (save.go): kinds the controller owns are refused, uploads stop once the
// row is cancelled, lost or collected, quotas bound what a pod stores,
// max_bytes_per_submitter and max_bytes_per_cluster what a submitter's or a
// cluster's pods store and max_total_bytes what all pods store together, and an upload is staged
// only when it fits. Artifacts are content-addressed
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
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"crucible.dev/crucible/internal/fleet"
	"crucible.dev/crucible/internal/jwt"
	"crucible.dev/crucible/internal/lru"
	"crucible.dev/crucible/internal/profile"
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

// Options configures a Handler.
type Options struct {
	Clusters []Cluster
	Store    store.Store
	// Artifacts is where the bytes go: an artifact.Dir with SQLite, the
	// database (pgblob) with PostgreSQL, so every replica serves them.
	Artifacts Blobs
	// Ingest is the profile's [ingest] section, its defaults applied
	// (profile.Parse; tests start from profile.Default().Ingest): the body
	// bound, the caches, the per-source and per-pod rates, the trusted
	// proxies and the upload quotas and pacing (R-IN7, save.go). Package
	// profile is the one home of their defaults and their validation: New
	// refuses a zero limit (profile.ValidateIngest) instead of choosing one.
	profile.Ingest

	// The fields below are not in the profile; a zero one takes the value
	// noted, which is this package's (or package jwt's) own choice.

	// JWKSMinRefresh is the least time between JWKS fetches of a cluster
	// caused by unknown key ids (zero: jwt.DefaultMinRefresh).
	JWKSMinRefresh time.Duration
	// freeBytes reports the artifact volume's free space (nil: the
	// Artifacts' FreeBytes, if it has one; else no floor); tests replace it.
	freeBytes func() (uint64, error)
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// Logger receives the handler's logs (nil: discarded).
	Logger *slog.Logger

	// insecureSkipAuth skips the token checks (steps 1, 2, 4 and 5; the
	// pod's row is still required). Only tests in this package set it, to
	// measure what authentication costs.
	insecureSkipAuth bool
	// reviewTimeout shortens tokenReviewTimeout; only tests set it.
	reviewTimeout time.Duration
}

// tokenReviewTimeout bounds one TokenReview.
const tokenReviewTimeout = 10 * time.Second

// config is Options as the handler computes with it: the section's
// durations, rates and proxy CIDRs converted once, by New, to
// time.Duration, float64 and netip.Prefix. The converted fields keep the
// section's names and shadow its own, so h.opts.AcceptTTL is the profile's
// accept_ttl; the section's other limits are read through Options as they
// are.
type config struct {
	Options
	AcceptTTL, NegativeTTL, UploadRateWindow time.Duration
	RatePerSource, RatePerPod                float64
	TrustedProxies                           []netip.Prefix
}

// newConfig checks opts and converts it. It fills in only what the profile
// does not configure (clock, logger, free-space probe, test knobs).
func newConfig(opts Options) (config, error) {
	if err := opts.validate(); err != nil {
		return config{}, err
	}
	opts.setDefaults()
	in := opts.Ingest
	c := config{
		Options: opts, AcceptTTL: in.AcceptTTL.Duration, NegativeTTL: in.NegativeTTL.Duration, UploadRateWindow: in.UploadRateWindow.Duration,
		RatePerSource: float64(in.RatePerSource), RatePerPod: float64(in.RatePerPod),
	}
	for _, cidr := range in.TrustedProxies {
		c.TrustedProxies = append(c.TrustedProxies, netip.MustParsePrefix(cidr)) // validate parsed it
	}
	return c, nil
}

// setDefaults fills the fields that are not profile settings (a nil clock
// or logger is no default of the profile); a zero profile value was
// refused by validate.
func (o *Options) setDefaults() {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.reviewTimeout == 0 {
		o.reviewTimeout = tokenReviewTimeout
	}
	if fs, ok := o.Artifacts.(freeSpacer); ok && o.freeBytes == nil {
		o.freeBytes = fs.FreeBytes
	}
}

// validate reports every problem at once.
func (o *Options) validate() error {
	errs := validateClusters(o.Clusters)
	if o.Store == nil {
		errs = append(errs, errors.New("store: missing"))
	}
	if o.Artifacts == nil {
		errs = append(errs, errors.New("artifacts: missing"))
	}
	if o.JWKSMinRefresh < 0 {
		errs = append(errs, errors.New("jwksMinRefresh: negative"))
	}
	// The section is the profile's: package profile validates it, as Parse
	// does, with the same key paths and messages.
	if section := profile.ValidateIngest(&o.Ingest, field.NewPath("ingest")); len(section) > 0 {
		errs = append(errs, &profile.ProfileError{Errs: section})
	}
	return errors.Join(errs...)
}

// validateClusters reports every problem of a validator map at once.
func validateClusters(clusters []Cluster) []error {
	var errs []error
	if len(clusters) == 0 {
		errs = append(errs, errors.New("clusters: none"))
	}
	seen := map[string]bool{}
	for i, c := range clusters {
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
	return errs
}

// Handler serves the drop-box. The controller mounts it on its external mux
// for "/api/pods/".
type Handler struct {
	opts       config
	log        *slog.Logger
	validators atomic.Pointer[validators] // swapped whole by SetClusters

	accept      *lru.Cache[acceptEntry]
	negative    *lru.Cache[struct{}]
	limiters    *lru.Cache[limiter] // per source
	podLimiters *lru.Cache[limiter] // per authenticated pod
	// signedLimiters are the sources' buckets of signed tokens refused;
	// readLimiters those of a token and of a pod uid whose requests were
	// refused after a store read (refuseBeforeRead).
	signedLimiters *lru.Cache[limiter]
	readLimiters   *lru.Cache[limiter]
	unknown        *lru.Cache[struct{}] // pod ids the store did not know, for the negative TTL
	logged         *lru.Cache[struct{}] // refusals logged in the last refusalLogEvery
	flights        flights
	locks          keyedMutex
	staging        podSlots

	reviewTimeout time.Duration
}

// validators is the validator map in force: a request reads it once.
type validators struct {
	byName map[string]*cluster
	order  []*cluster // as configured: the pre-check's candidates
}

// cluster is a validator map entry with its key set and issuer.
type cluster struct {
	Cluster
	keys   *jwt.KeySet
	issuer *clusterIssuer
}

// New validates opts, fills in what the profile does not configure and
// builds the handler. It does no I/O: each cluster's keys are fetched on
// first need.
func New(opts Options) (*Handler, error) {
	c, err := newConfig(opts)
	if err != nil {
		return nil, fmt.Errorf("ingest options: %w", err)
	}
	h := &Handler{
		opts:           c,
		log:            c.Logger,
		accept:         lru.New[acceptEntry](c.CacheSize),
		negative:       lru.New[struct{}](c.CacheSize),
		limiters:       lru.New[limiter](c.CacheSize),
		podLimiters:    lru.New[limiter](c.CacheSize),
		signedLimiters: lru.New[limiter](c.CacheSize),
		readLimiters:   lru.New[limiter](c.CacheSize),
		unknown:        lru.New[struct{}](c.CacheSize),
		logged:         lru.New[struct{}](c.CacheSize),
		reviewTimeout:  c.reviewTimeout,
	}
	h.validators.Store(h.newValidators(c.Clusters, nil))
	return h, nil
}

// SetClusters replaces the validator map, for a reloaded profile: a spoke
// added, changed (a new client) or draining. An unchanged cluster keeps
// its key set and issuer, so its pods' uploads go on without a fetch; an
// upload in flight finishes with the map it began with. A map with a
// problem is refused whole and the one in force stays.
func (h *Handler) SetClusters(clusters []Cluster) error {
	if errs := validateClusters(clusters); len(errs) > 0 {
		return fmt.Errorf("drop-box validators: %w", errors.Join(errs...))
	}
	h.validators.Store(h.newValidators(clusters, h.validators.Load()))
	return nil
}

// newValidators builds the validator map of clusters, taking from old an
// entry that is the same.
func (h *Handler) newValidators(clusters []Cluster, old *validators) *validators {
	v := &validators{byName: make(map[string]*cluster, len(clusters))}
	for _, cc := range clusters {
		cl := (*cluster)(nil)
		if old != nil {
			if prev, ok := old.byName[cc.Name]; ok && prev.Cluster == cc {
				cl = prev
			}
		}
		if cl == nil {
			keys, issuer := newKeySet(cc.Client, h.opts.JWKSMinRefresh, h.opts.Now, h.log)
			cl = &cluster{Cluster: cc, keys: keys, issuer: issuer}
		}
		v.byName[cc.Name] = cl
		v.order = append(v.order, cl)
	}
	return v
}

package apiauth

import (
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"crucible.dev/crucible/internal/httperr"
	"crucible.dev/crucible/internal/lru"
	"crucible.dev/crucible/internal/metrics"
)

// BudgetAuthFailures labels crucible_budget_refusals_total for requests
// refused because their source failed authentication too often.
const BudgetAuthFailures = "api_auth_failures"

// refusalLogEvery is how often one source's refusals are logged: a flood is
// one line a minute, its size the metric's.
const refusalLogEvery = time.Minute

// failureBudget is a token bucket per source (SourceKey) of failed
// authentications. Only failures spend it, so many honest users behind one
// address never throttle each other; an empty bucket refuses the source's
// unknown tokens before they cost the hub a TokenReview. The buckets and
// the memory of logged refusals are bounded (LRU), so a flood from many
// addresses cannot grow memory either.
type failureBudget struct {
	perSecond float64
	burst     int
	buckets   *lru.Cache[*bucket]
	logged    *lru.Cache[struct{}]
	log       *slog.Logger
}

// newFailureBudget returns a budget of perSecond failures with burst per
// source, remembering at most size sources. An infinite perSecond never
// refuses.
func newFailureBudget(perSecond float64, burst, size int, log *slog.Logger) *failureBudget {
	if log == nil {
		log = slog.Default()
	}
	return &failureBudget{perSecond: perSecond, burst: max(burst, 1), buckets: lru.New[*bucket](size),
		logged: lru.New[struct{}](size), log: log}
}

// spend takes one failure from source's bucket. When it is empty it takes
// nothing and says how long until it holds one again.
func (f *failureBudget) spend(source string, now time.Time) (bool, time.Duration) {
	if math.IsInf(f.perSecond, 1) {
		return true, 0
	}
	return f.bucket(source, now).take(now, f.perSecond, float64(f.burst))
}

// refund gives back a failure spent up front for a review that turned out
// not to be one (an accepted token, a hub that did not answer).
func (f *failureBudget) refund(source string, now time.Time) {
	if math.IsInf(f.perSecond, 1) {
		return
	}
	f.bucket(source, now).give(now, f.perSecond, float64(f.burst))
}

func (f *failureBudget) bucket(source string, now time.Time) *bucket {
	return f.buckets.GetOrAdd(source, now, func() (*bucket, time.Time) {
		return &bucket{tokens: float64(f.burst), last: now}, time.Time{}
	})
}

// refuse is the answer to a source whose bucket is empty: 429 with
// Retry-After, counted, and logged once per source and minute (the source
// only; the token is never logged).
func (f *failureBudget) refuse(source string, wait time.Duration, now time.Time) error {
	metrics.BudgetRefusals.WithLabelValues(BudgetAuthFailures).Inc()
	if _, seen := f.logged.Get(source, now); !seen {
		f.logged.Put(source, struct{}{}, now.Add(refusalLogEvery))
		f.log.Warn("api: too many failed authentications; refusing the source's unknown tokens",
			"budget", BudgetAuthFailures, "source", source, "per_second", f.perSecond, "burst", f.burst)
	}
	secs := max(1, int(math.Ceil(wait.Seconds())))
	return httperr.New(http.StatusTooManyRequests,
		fmt.Sprintf("too many failed authentications from %s; retry in %d s (api.auth_failures_per_source)", source, secs)).
		With("Retry-After", strconv.Itoa(secs))
}

// bucket is one source's failures left, refilled at perSecond up to burst.
type bucket struct {
	mu     sync.Mutex
	tokens float64
	last   time.Time
}

func (b *bucket) take(now time.Time, perSecond, burst float64) (bool, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fill(now, perSecond, burst)
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) / perSecond * float64(time.Second))
}

func (b *bucket) give(now time.Time, perSecond, burst float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fill(now, perSecond, burst)
	b.tokens = min(burst, b.tokens+1)
}

// fill adds what accrued since the last call; a clock that went back adds
// nothing.
func (b *bucket) fill(now time.Time, perSecond, burst float64) {
	if d := now.Sub(b.last).Seconds(); d > 0 {
		b.tokens = min(burst, b.tokens+d*perSecond)
		b.last = now
	}
}

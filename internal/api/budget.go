package api

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"crucible.dev/crucible/internal/apiauth"
	"crucible.dev/crucible/internal/httperr"
	"crucible.dev/crucible/internal/lru"
	"crucible.dev/crucible/internal/metrics"
	"crucible.dev/crucible/internal/profile"
)

// Budget names, as crucible_budget_refusals_total labels them.
const (
	budgetViewers            = "live_viewers"
	budgetViewersPerIdentity = "live_viewers_per_identity"
	budgetViewerBuffer       = "live_viewer_buffer"
	budgetWriteTimeout       = "sse_write_timeout"
	budgetEventsQueue        = "events_queue"
	budgetEvents             = "events_streams"
	budgetEventsPerIdentity  = "events_streams_per_identity"
)

// Budget refusal bookkeeping.
const (
	// refusalLogEvery is how often one budget's refusals of one caller are
	// logged: a flood is one line a minute, its count the metric's.
	refusalLogEvery = time.Minute
	// maxRefusalKeys bounds what the log limiter remembers; past it,
	// entries older than refusalLogEvery are forgotten.
	maxRefusalKeys = 4096
	// streamRetryAfter is the Retry-After of a stream refused for the
	// stream caps: streams end with their pods or their watchers, not on a
	// schedule.
	streamRetryAfter = 30 * time.Second
)

// budgets is a Server's count of open streams and its memory of which
// refusals it logged. The zero value is ready.
type budgets struct {
	mu      sync.Mutex
	viewers streamSlots // live-log streams, against [live]'s caps
	events  streamSlots // GET /api/events streams, against [events]'s
	// sessions are run-live sessions, against [run_live]'s.
	sessions streamSlots
	// opens are each caller's session opens ([run_live]
	// opens_per_minute), a bucket per caller, the callers bounded.
	opens  *lru.Cache[*rate.Limiter]
	logged map[string]time.Time // budget + "\x00" + caller: last logged
	now    func() time.Time     // nil: time.Now
}

// streamSlots counts one kind of stream open, in all and per caller.
type streamSlots struct {
	open       int
	byIdentity map[string]int
}

// streamKind is one kind of stream counted against caps of the profile:
// its slots, its caps in all and per caller, the budget each refusal
// counts under, and how a refusal names them ("[live] max_viewers").
type streamKind struct {
	what                      string // "live-log streams"
	slots                     func(*budgets) *streamSlots
	caps                      func(*profile.Profile) (all, perIdentity int)
	allKey, perIdentityKey    string
	allBudget, identityBudget string
}

// The streams the API counts: live logs against [live]'s caps, GET
// /api/events against [events]' and run-live sessions against
// [run_live]'s.
var (
	viewerStreams = streamKind{
		what: "live-log streams", slots: func(b *budgets) *streamSlots { return &b.viewers },
		caps:   func(p *profile.Profile) (int, int) { return p.Live.MaxViewers, p.Live.MaxViewersPerIdentity },
		allKey: "[live] max_viewers", perIdentityKey: "[live] max_viewers_per_identity",
		allBudget: budgetViewers, identityBudget: budgetViewersPerIdentity,
	}
	eventStreams = streamKind{
		what: "event streams", slots: func(b *budgets) *streamSlots { return &b.events },
		caps:   func(p *profile.Profile) (int, int) { return p.Events.MaxStreams, p.Events.MaxStreamsPerIdentity },
		allKey: "[events] max_streams", perIdentityKey: "[events] max_streams_per_identity",
		allBudget: budgetEvents, identityBudget: budgetEventsPerIdentity,
	}
	sessionStreams = streamKind{
		what: "port-forward sessions", slots: func(b *budgets) *streamSlots { return &b.sessions },
		caps:   func(p *profile.Profile) (int, int) { return p.RunLive.MaxSessions, p.RunLive.MaxSessionsPerIdentity },
		allKey: "[run_live] max_sessions", perIdentityKey: "[run_live] max_sessions_per_identity",
		allBudget: budgetSessions, identityBudget: budgetSessionsPerIdentity,
	}
)

// callerName names id in budgets and logs: its user name, never a token.
func callerName(id apiauth.Identity) string {
	if id.User == "" {
		return "anonymous"
	}
	return id.User
}

// acquireStream takes one of kind's slots for caller within the caps of
// the profile in force, or refuses with 429 and Retry-After naming the cap
// that is full; the refusal is counted and logged (refused). The
// per-caller cap is checked first, so a caller at its own cap is told so
// even when all are taken. Call release when the stream ends.
func (s *Server) acquireStream(kind streamKind, caller string) (release func(), err error) {
	all, perIdentity := kind.caps(s.profile())
	b := &s.budgets
	slots := kind.slots(b)
	b.mu.Lock()
	budget, limit, key := "", 0, ""
	switch {
	case slots.byIdentity[caller] >= perIdentity:
		budget, limit, key = kind.identityBudget, perIdentity, kind.perIdentityKey
	case slots.open >= all:
		budget, limit, key = kind.allBudget, all, kind.allKey
	default:
		if slots.byIdentity == nil {
			slots.byIdentity = map[string]int{}
		}
		slots.open++
		slots.byIdentity[caller]++
	}
	b.mu.Unlock()
	if budget != "" {
		s.refused(budget, caller)
		msg := fmt.Sprintf("too many %s open: %s is %d", kind.what, key, limit)
		if budget == kind.identityBudget {
			msg = fmt.Sprintf("too many %s open for %s: %s is %d", kind.what, caller, key, limit)
		}
		return nil, &httperr.Error{Code: http.StatusTooManyRequests, Msg: msg,
			Header: http.Header{"Retry-After": {strconv.Itoa(int(streamRetryAfter.Seconds()))}}}
	}
	var once sync.Once
	return func() { once.Do(func() { b.release(slots, caller) }) }, nil
}

// maxOpenCallers bounds the callers whose session opens are remembered;
// past it the least recent is forgotten (and starts again with a full
// bucket).
const maxOpenCallers = 4096

// spendOpen takes one of caller's session opens, a bucket of perMinute
// refilled over a minute, or refuses with 429 naming key and how long to
// wait. Zero perMinute never refuses. Every open costs the spoke a dial,
// whether or not the session then lasts, so the concurrent caps alone do
// not bound what one caller makes the spoke do.
func (s *Server) spendOpen(caller string, perMinute int, key, budget string) error {
	if perMinute <= 0 {
		return nil
	}
	b := &s.budgets
	now := time.Now()
	b.mu.Lock()
	if b.now != nil {
		now = b.now()
	}
	if b.opens == nil {
		b.opens = lru.New[*rate.Limiter](maxOpenCallers)
	}
	b.mu.Unlock()
	l := b.opens.GetOrAdd(caller, now, func() (*rate.Limiter, time.Time) {
		return rate.NewLimiter(rate.Every(time.Minute/time.Duration(perMinute)), perMinute), time.Time{}
	})
	l.SetLimitAt(now, rate.Every(time.Minute/time.Duration(perMinute))) // a reload may change it
	l.SetBurstAt(now, perMinute)
	r := l.ReserveN(now, 1)
	wait := r.DelayFrom(now)
	if wait == 0 {
		return nil
	}
	r.CancelAt(now)
	s.refused(budget, caller)
	secs := max(1, int((wait+time.Second-1)/time.Second))
	return &httperr.Error{Code: http.StatusTooManyRequests,
		Msg:    fmt.Sprintf("%s opened too many sessions: %s is %d; retry in %d s", caller, key, perMinute, secs),
		Header: http.Header{"Retry-After": {strconv.Itoa(secs)}}}
}

func (b *budgets) release(slots *streamSlots, caller string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	slots.open--
	if slots.byIdentity[caller]--; slots.byIdentity[caller] <= 0 {
		delete(slots.byIdentity, caller)
	}
}

// refused counts a refusal of budget and logs it, once per caller and
// budget a minute.
func (s *Server) refused(budget, caller string) {
	metrics.BudgetRefusals.WithLabelValues(budget).Inc()
	if s.budgets.shouldLog(budget, caller) {
		s.Log.Warn("budget refused a caller", "budget", budget, "caller", caller)
	}
}

func (b *budgets) shouldLog(budget, caller string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	if b.now != nil {
		now = b.now()
	}
	if b.logged == nil {
		b.logged = map[string]time.Time{}
	}
	k := budget + "\x00" + caller
	if last, ok := b.logged[k]; ok && now.Sub(last) < refusalLogEvery {
		return false
	}
	if len(b.logged) >= maxRefusalKeys {
		for k, last := range b.logged {
			if now.Sub(last) >= refusalLogEvery {
				delete(b.logged, k)
			}
		}
	}
	if len(b.logged) >= maxRefusalKeys {
		return false // as many callers refused this minute: the metric counts them
	}
	b.logged[k] = now
	return true
}

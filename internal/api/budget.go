package api

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"crucible.dev/crucible/internal/apiauth"
	"crucible.dev/crucible/internal/fleet"
	"crucible.dev/crucible/internal/httperr"
	"crucible.dev/crucible/internal/metrics"
)

// Budget names, as crucible_budget_refusals_total labels them.
const (
	budgetViewers            = "live_viewers"
	budgetViewersPerIdentity = "live_viewers_per_identity"
	budgetViewerBuffer       = "live_viewer_buffer"
	budgetWriteTimeout       = "sse_write_timeout"
	budgetEventsQueue        = "events_queue"
)

// Budget refusal bookkeeping.
const (
	// refusalLogEvery is how often one budget's refusals of one caller are
	// logged: a flood is one line a minute, its count the metric's.
	refusalLogEvery = time.Minute
	// maxRefusalKeys bounds what the log limiter remembers; past it,
	// entries older than refusalLogEvery are forgotten.
	maxRefusalKeys = 4096
	// viewerRetryAfter is the Retry-After of a live-log stream refused for
	// the stream caps: streams end with their pods, not on a schedule.
	viewerRetryAfter = 30 * time.Second
)

// budgets is a Server's count of open live-log streams and its memory of
// which refusals it logged. The zero value is ready.
type budgets struct {
	mu         sync.Mutex
	viewers    int
	byIdentity map[string]int
	logged     map[string]time.Time // budget + "\x00" + caller: last logged
	now        func() time.Time     // nil: time.Now
}

// callerName names id in budgets and logs: its user name, never a token.
func callerName(id apiauth.Identity) string {
	if id.User == "" {
		return "anonymous"
	}
	return id.User
}

// liveLimits is the profile's [live] section, fleet's defaults without one.
func (s *Server) liveLimits() fleet.Live {
	if s.Profile != nil {
		return s.Profile.Live
	}
	return fleet.Default().Live
}

// acquireViewer takes one of the live-log stream slots for caller, or
// refuses with 429 naming the cap that is full. Call release when the
// stream ends.
func (s *Server) acquireViewer(caller string) (release func(), err error) {
	l := s.liveLimits()
	b := &s.budgets
	b.mu.Lock()
	budget, limit := "", 0
	switch {
	case b.byIdentity[caller] >= l.MaxViewersPerIdentity:
		budget, limit = budgetViewersPerIdentity, l.MaxViewersPerIdentity
	case b.viewers >= l.MaxViewers:
		budget, limit = budgetViewers, l.MaxViewers
	default:
		if b.byIdentity == nil {
			b.byIdentity = map[string]int{}
		}
		b.viewers++
		b.byIdentity[caller]++
	}
	b.mu.Unlock()
	if budget != "" {
		s.refused(budget, caller)
		msg := fmt.Sprintf("too many live-log streams open: [live] max_viewers is %d", limit)
		if budget == budgetViewersPerIdentity {
			msg = fmt.Sprintf("too many live-log streams open for %s: [live] max_viewers_per_identity is %d", caller, limit)
		}
		return nil, &httperr.Error{Code: http.StatusTooManyRequests, Msg: msg,
			Header: http.Header{"Retry-After": {strconv.Itoa(int(viewerRetryAfter.Seconds()))}}}
	}
	var once sync.Once
	return func() { once.Do(func() { b.releaseViewer(caller) }) }, nil
}

func (b *budgets) releaseViewer(caller string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.viewers--
	if b.byIdentity[caller]--; b.byIdentity[caller] <= 0 {
		delete(b.byIdentity, caller)
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

package webhook

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// refusalSummaryInterval is the most often the Info log mentions refusals.
const refusalSummaryInterval = time.Minute

// Kinds of refusal counted in the summary line, besides resultRejected and
// resultError.
const refusedRequest = "bad_request"

// refusals keeps refused reviews out of the Info log. Anyone who can reach
// the API server can make it forward forged tokens here, so one Info line per
// refusal would let them flood the log; each refusal is logged at Debug
// instead, and at most one Info line per interval says how many there were.
// The first refusal after a quiet interval is summed up at once, so a burst
// is visible when it starts. Provider and key problems are not refusals:
// the key set logs each failed fetch itself, within its rate limit.
type refusals struct {
	now func() time.Time

	mu       sync.Mutex
	counts   map[string]int
	since    time.Time // start of the counted window
	lastLine time.Time // when the last summary was logged
}

func newRefusals(now func() time.Time) *refusals {
	return &refusals{now: now, counts: map[string]int{}}
}

// note logs one refusal of the given kind at Debug, with attrs (never the
// token), and the summary at Info when it is due.
func (r *refusals) note(ctx context.Context, log *slog.Logger, kind, msg string, attrs ...any) {
	log.Log(ctx, slog.LevelDebug, msg, attrs...)

	r.mu.Lock()
	now := r.now()
	if len(r.counts) == 0 {
		r.since = now
	}
	r.counts[kind]++
	if !r.lastLine.IsZero() && now.Sub(r.lastLine) < refusalSummaryInterval {
		r.mu.Unlock()
		return
	}
	counts, since := r.counts, r.since
	r.counts, r.lastLine = map[string]int{}, now
	r.mu.Unlock()

	log.LogAttrs(ctx, slog.LevelInfo, "token reviews refused",
		slog.Int("rejected", counts[resultRejected]),
		slog.Int("errors", counts[resultError]),
		slog.Int("bad_requests", counts[refusedRequest]),
		slog.Time("since", since),
		slog.String("detail", "per-review reasons are logged at debug level"))
}

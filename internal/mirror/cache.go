package mirror

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"crucible.dev/crucible/internal/metrics"
)

const (
	// fetchTimeout bounds one fetch from the hub API, and so how long a
	// request waits when the cached copy has expired.
	fetchTimeout = 5 * time.Second
	// retryBackoff is how long after a failed fetch the mirror answers from
	// what it has without asking the hub again, so that neither an outage nor
	// a flood of clients on the external listener becomes a stream of
	// upstream requests.
	retryBackoff = 5 * time.Second
)

// source says where an answer comes from; the values are metric labels.
type source string

const (
	sourceFresh       source = "fresh"
	sourceStale       source = "stale"
	sourceUnavailable source = "unavailable"
)

// Results of an upstream fetch; the values are metric labels.
const (
	resultOK      = "ok"
	resultError   = "error"
	resultInvalid = "invalid"
)

// snapshot is a good document as served, with the time it was fetched.
type snapshot struct {
	body      []byte
	fetchedAt time.Time
}

// flight is one upstream fetch in progress; done is closed when it ends.
type flight struct{ done chan struct{} }

// cache holds the last good copy of one document and refreshes it on demand.
// It fetches only when a request needs it, so an idle mirror costs the hub
// nothing.
type cache struct {
	doc      document
	ttl      time.Duration
	maxStale time.Duration
	now      func() time.Time
	log      *slog.Logger
	fetch    func(context.Context, document) (raw, served []byte, err error)
	keeper   Keeper // nil: none

	mu       sync.Mutex
	good     *snapshot // nil until the first good fetch; never replaced by a failure
	lastErr  error     // cause of the latest failure, nil after a success
	failedAt time.Time // time of the latest failure, zero after a success
	flight   *flight   // the fetch in progress, if any
	waiting  int       // requests waiting on flight
}

// get returns the snapshot to answer from, nil if there is none. When the
// cached copy has expired and no failure is recent, it waits for a fetch that
// all concurrent callers share. The fetch runs detached from ctx, so a caller
// that gives up does not fail it for the others.
func (c *cache) get(ctx context.Context) *snapshot {
	c.mu.Lock()
	if !c.shouldFetch(c.now()) {
		defer c.mu.Unlock()
		return c.good
	}
	f := c.flight
	if f == nil {
		f = &flight{done: make(chan struct{})}
		c.flight = f
		go c.refresh(context.WithoutCancel(ctx), f)
	}
	c.waiting++
	c.mu.Unlock()

	select {
	case <-f.done:
	case <-ctx.Done():
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	c.waiting--
	return c.good
}

// shouldFetch reports whether a request at now needs a fetch. Callers hold mu.
func (c *cache) shouldFetch(now time.Time) bool {
	if c.good != nil && now.Sub(c.good.fetchedAt) < c.ttl {
		return false
	}
	return c.failedAt.IsZero() || now.Sub(c.failedAt) >= retryBackoff
}

// refresh fetches the document once, keeps it if good and wakes the waiters.
// Requests arriving between the unlock and the wake-up find the new copy, or
// the failure's backoff, and do not start another fetch.
func (c *cache) refresh(ctx context.Context, f *flight) {
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	raw, body, err := c.fetch(ctx, c.doc)

	c.mu.Lock()
	recovered := err == nil && c.lastErr != nil
	var fetchedAt time.Time
	if err == nil {
		fetchedAt = c.now()
		c.good = &snapshot{body: body, fetchedAt: fetchedAt}
		c.lastErr, c.failedAt = nil, time.Time{}
	} else {
		c.lastErr, c.failedAt = err, c.now()
	}
	c.flight = nil
	c.mu.Unlock()

	// Recorded before waking the waiters, so the metrics already count the
	// fetch when its answers go out.
	c.record(err, recovered)
	close(f.done)
	if err == nil && c.keeper != nil {
		// A time of its own: the fetch may have used most of its bound.
		kctx, kcancel := context.WithTimeout(context.WithoutCancel(ctx), fetchTimeout)
		defer kcancel()
		if err := c.keeper.KeepMirrorDocument(kctx, c.doc.name, raw, fetchedAt); err != nil {
			c.log.Warn("mirror could not keep the fetched document", "document", c.doc.name, "err", err)
		}
	}
}

// restore takes the kept document as the good copy when the cache has
// none: prepared for this mirror as a fetch is, with its own fetch time,
// so that judge counts max_stale from the hub's answer, not from this
// process's start. A kept document that does not prepare (a hand-edited
// row) is logged and not served.
func (c *cache) restore(ctx context.Context) error {
	raw, fetchedAt, err := c.keeper.MirrorDocument(ctx, c.doc.name)
	if err != nil || raw == nil {
		return err
	}
	body, err := c.doc.prepare(raw)
	if err != nil {
		c.log.Warn("mirror ignores its kept document", "document", c.doc.name, "err", err)
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.good == nil || c.good.fetchedAt.Before(fetchedAt) {
		c.good = &snapshot{body: body, fetchedAt: fetchedAt}
		c.log.Info("mirror restored its kept document", "document", c.doc.name, "fetched_at", fetchedAt)
	}
	return nil
}

// record counts a fetch and logs failures and recoveries. The error text
// goes to the log only; clients never see it.
func (c *cache) record(err error, recovered bool) {
	result := fetchResult(err)
	metrics.MirrorUpstreamFetches.WithLabelValues(c.doc.name, result).Inc()
	switch {
	case err != nil:
		c.log.Warn("mirror upstream fetch failed", "document", c.doc.name, "result", result, "err", err)
	case recovered:
		c.log.Info("mirror upstream fetch recovered", "document", c.doc.name)
	}
}

func fetchResult(err error) string {
	switch {
	case err == nil:
		return resultOK
	case errors.Is(err, errInvalid):
		return resultInvalid
	default:
		return resultError
	}
}

// judge says how s may be served at now and, when fresh, for how much longer.
func (c *cache) judge(s *snapshot, now time.Time) (source, time.Duration) {
	if s == nil {
		return sourceUnavailable, 0
	}
	age := now.Sub(s.fetchedAt)
	switch {
	case age < c.ttl:
		// min guards against a clock that went backwards.
		return sourceFresh, min(c.ttl-age, c.ttl)
	case age <= c.ttl+c.maxStale:
		return sourceStale, 0
	default:
		return sourceUnavailable, 0
	}
}

// retryAfter is how long until the mirror will ask the hub again.
func (c *cache) retryAfter(now time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failedAt.IsZero() {
		return 0
	}
	return max(c.failedAt.Add(retryBackoff).Sub(now), 0)
}

// age is the age of the good copy, false while there is none.
func (c *cache) age() (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.good == nil {
		return 0, false
	}
	return c.now().Sub(c.good.fetchedAt), true
}

func (c *cache) status() DocumentStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := DocumentStatus{LastFailure: c.failedAt, LastError: c.lastErr}
	if c.good != nil {
		st.LastSuccess = c.good.fetchedAt
	}
	return st
}

// waiters is how many requests wait on the fetch in progress.
func (c *cache) waiters() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.waiting
}

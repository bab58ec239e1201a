package live

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"crucible.dev/crucible/internal/retry"
)

// stream is one pod's upstream and its viewers.
type stream struct {
	hub    *Hub
	key    Key
	cancel context.CancelFunc
	// pace spans the stream's reopens: a reconnect does not refill it.
	pace *rate.Limiter

	mu      sync.Mutex
	viewers map[*Viewer]struct{} // those still sent lines
	// attached counts the viewers not yet closed, sent lines or not: the
	// history stays for their backlogs until the last one closes.
	attached int
	history  []Line // the last lines, numbered consecutively
	histCost int64  // their cost (lineCost)
	last     int64  // the number of the last line published
	ended    bool

	// Reconnect bookkeeping, touched only by run's goroutine.
	n      int64     // lines delivered
	lastTS time.Time // timestamp of the last delivered line
	atLast []string  // texts delivered with timestamp lastTS, in order
	skip   []string  // after a reopen: atLast still to be skipped
}

func newStream(h *Hub, key Key) *stream {
	ctx, cancel := context.WithCancel(context.Background())
	s := &stream{hub: h, key: key, cancel: cancel, pace: newPacer(h.opts.ReadRate), viewers: map[*Viewer]struct{}{}}
	go s.run(ctx)
	return s
}

// add registers a viewer; nil if the stream already ended.
func (s *stream) add(after int64) *Viewer {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return nil
	}
	v := &Viewer{s: s, ch: make(chan Line, s.hub.opts.Buffer), after: after, next: 1}
	if len(s.history) > 0 {
		v.next, v.joinLast = max(after+1, s.history[0].N), s.last
	}
	s.viewers[v] = struct{}{}
	s.attached++
	return v
}

// at returns line n if the history still holds it.
func (s *stream) at(n int64) (Line, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.history) == 0 || n < s.history[0].N || n > s.last {
		return Line{}, false
	}
	return s.history[n-s.history[0].N], true
}

func (s *stream) remove(v *Viewer) {
	s.mu.Lock()
	delete(s.viewers, v)
	s.attached--
	// Dropped viewers are no longer among s.viewers: whichever viewer
	// leaves, none left to send to means the upstream is done.
	last := len(s.viewers) == 0 && !s.ended
	if last {
		// The last viewer left: nobody needs the upstream any more.
		s.ended = true
		s.cancel()
	}
	if last || s.attached == 0 {
		s.freeHistory()
	}
	s.mu.Unlock()
	if last {
		s.hub.release(s) // after s.mu: Subscribe locks the hub, then s
	}
}

// drop stops sending to v, with ErrSlowViewer; s.mu must not be held.
func (s *stream) drop(v *Viewer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropLocked(v)
}

func (s *stream) dropLocked(v *Viewer) {
	if _, ok := s.viewers[v]; ok {
		v.err = ErrSlowViewer
		close(v.ch)
		delete(s.viewers, v)
	}
}

func (s *stream) freeHistory() {
	s.hub.held.Add(-s.histCost)
	s.history, s.histCost = nil, 0
}

// publish hands l to every viewer without ever waiting for one, and keeps
// it in the history within both of its bounds. A viewer whose queue would
// pass either of its bounds is dropped; an empty queue always takes a line,
// so one longer than a bound cannot starve a viewer that keeps up.
func (s *stream) publish(l Line) {
	cost := lineCost(l)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return // every viewer left, or were ended: nobody is to get l
	}
	s.history = append(s.history, l)
	s.histCost += cost
	s.last = l.N
	s.hub.held.Add(cost)
	o := s.hub.opts
	for len(s.history) > 1 && (len(s.history) > o.History || s.histCost > o.HistoryBytes) {
		c := lineCost(s.history[0])
		s.histCost -= c
		s.hub.held.Add(-c)
		s.history[0] = Line{} // no backlog shares the array: free the text now
		s.history = s.history[1:]
	}
	for v := range s.viewers {
		q := v.queued.Load()
		if len(v.ch) == cap(v.ch) || q > 0 && q+cost > o.BufferBytes {
			s.dropLocked(v)
			continue
		}
		v.queued.Add(cost)
		s.hub.held.Add(cost)
		v.ch <- l // never blocks: only publish sends, and there is room
	}
}

// end closes every viewer with err (nil: the pod finished).
func (s *stream) end(err error) {
	s.hub.release(s)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = true
	for v := range s.viewers {
		v.err = err
		close(v.ch)
		delete(s.viewers, v)
	}
	if s.attached == 0 {
		s.freeHistory()
	}
}

func (s *stream) run(ctx context.Context) {
	defer s.cancel()
	err := s.follow(ctx)
	if ctx.Err() != nil {
		return // every viewer left
	}
	if err != nil {
		s.hub.opts.Log.Warn("live log upstream failed", "cluster", s.key.Cluster, "pod", s.key.Pod, "lines", s.n, "error", err)
	}
	s.end(err)
}

// follow waits for the container to start, follows its log through
// transient errors, and once it finished reads what the follow may have
// missed. nil means the whole log was delivered.
func (s *stream) follow(ctx context.Context) error {
	src := s.hub.source(s.key)
	b := s.backoff()
	for {
		st, err := src.Status(ctx)
		if err == nil && st.Started {
			break
		}
		if err != nil && !retry.IsTransient(err) {
			return fmt.Errorf("pod status: %w", err)
		}
		if err := b.wait(ctx, err, s.hub.opts.Poll); err != nil {
			return err
		}
	}
	b = s.backoff()
	recovering := false // a stream broke: the spoke may be restarting
	for {
		finished, err := s.readOnce(ctx, src, true)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !finished {
			// The stream ended or broke: over, or a blip of the spoke?
			finished = s.finishedAfter(ctx, src, 0)
		}
		if !finished && err == nil {
			// A clean end is most often the container's own, and its status
			// lags its exit (the kubelet writes it after): asked again one
			// poll later, a finished pod is drained rather than followed
			// again, so its end costs no reopen per moment of that lag.
			finished = s.finishedAfter(ctx, src, s.hub.opts.Poll)
		}
		if finished {
			return s.drain(ctx, src)
		}
		// A kube-apiserver that just restarted answers 403 until its
		// authorizer has synced: while recovering from a broken stream,
		// every error is retried within the budget.
		if err != nil && !transient(err) && !recovering {
			return fmt.Errorf("follow log: %w", err)
		}
		recovering = recovering || err == nil || transient(err)
		// A clean end while the container runs (an API server shutting
		// down) is a reconnect like any transient error.
		if s.progressed(&b) {
			b = s.backoff()
			recovering = err == nil || transient(err)
		}
		if err := b.wait(ctx, err, 0); err != nil {
			return fmt.Errorf("follow log: %w", err)
		}
	}
}

// drain reads the finished log once more from the last timestamp: the lines
// a follow stream cut short at the container's end.
func (s *stream) drain(ctx context.Context, src Source) error {
	b := s.backoff()
	for {
		_, err := s.readOnce(ctx, src, false)
		if err == nil || !transient(err) {
			if errors.Is(err, ErrGone) {
				return nil // deleted with its log: what was read is all there is
			}
			return err
		}
		if err := b.wait(ctx, err, 0); err != nil {
			return err
		}
	}
}

// readOnce opens the log from the last timestamp and publishes the lines not
// yet delivered. While following it also watches the pod and stops when the
// container finished (finished true).
func (s *stream) readOnce(ctx context.Context, src Source, follow bool) (finished bool, err error) {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rc, err := src.Open(rctx, s.lastTS.Truncate(time.Second), follow)
	if err != nil {
		return false, err
	}
	defer rc.Close()
	s.skip = append([]string(nil), s.atLast...)
	var done sync.WaitGroup
	var finishedFlag bool
	if follow {
		done.Add(1)
		go func() {
			defer done.Done()
			finishedFlag = s.watchEnd(rctx, src)
			cancel()
		}()
	}
	lr := newLineReader(&pacedReader{ctx: rctx, r: rc, lim: s.pace}, false)
	for {
		text, rerr := lr.next()
		if rerr != nil {
			cancel()
			done.Wait()
			if errors.Is(rerr, io.EOF) {
				rerr = nil
			}
			if finishedFlag || ctx.Err() != nil {
				return finishedFlag, nil
			}
			if rerr != nil {
				// An opened stream that breaks (reset, GOAWAY of an API
				// server shutting down, cut line) is the transport's fault.
				rerr = &errBroken{rerr}
			}
			return false, rerr
		}
		s.accept(text)
	}
}

// finishedAfter reports whether the pod's container finished, asked after
// wait; a status that cannot be read is not finished.
func (s *stream) finishedAfter(ctx context.Context, src Source, wait time.Duration) bool {
	if wait > 0 {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(wait):
		}
	}
	st, err := src.Status(ctx)
	return err == nil && st.Finished
}

// watchEnd polls the pod until its container finished (true) or ctx ends.
func (s *stream) watchEnd(ctx context.Context, src Source) bool {
	t := time.NewTicker(s.hub.opts.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
		if st, err := src.Status(ctx); err == nil && st.Finished {
			return true
		}
	}
}

// accept publishes a line unless a reopened stream delivered it already:
// lines before the last timestamp, and at it those texts already sent.
func (s *stream) accept(raw string) {
	ts, text, ok := parseTimestamped(raw)
	if !ok {
		ts = s.lastTS // keep order; such a line is not expected from the API
	}
	switch {
	case ts.Before(s.lastTS):
		return
	case ts.Equal(s.lastTS) && s.n > 0:
		if len(s.skip) > 0 && s.skip[0] == text {
			s.skip = s.skip[1:]
			return
		}
		s.skip = nil
		s.atLast = append(s.atLast, text)
	default:
		s.skip = nil
		s.lastTS, s.atLast = ts, []string{text}
	}
	s.n++
	l := Line{N: s.n, TS: ts, Text: text}
	if render := s.hub.opts.Render; render != nil {
		l.Event = render(l)
	}
	s.publish(l)
}

// errBroken is a log stream that broke after it opened: always retried.
type errBroken struct{ err error }

func (e *errBroken) Error() string { return "log stream broke: " + e.err.Error() }
func (e *errBroken) Unwrap() error { return e.err }

func transient(err error) bool {
	var broken *errBroken
	return retry.IsTransient(err) || errors.As(err, &broken)
}

// backoff is a retry.Policy's schedule: capped exponential with full jitter,
// within a budget counted from the last progress.
type backoff struct {
	p        retry.Policy
	next     time.Duration
	deadline time.Time
	n        int64
}

func (s *stream) backoff() backoff {
	p := s.hub.opts.Retry
	return backoff{p: p, next: p.Initial, deadline: time.Now().Add(p.Budget), n: s.n}
}

// progressed reports whether lines arrived since b began.
func (s *stream) progressed(b *backoff) bool { return s.n != b.n }

// wait sleeps before the next try: fixed when every is set (polling), else
// the next backoff step. It fails once the budget is spent.
func (b *backoff) wait(ctx context.Context, last error, every time.Duration) error {
	sleep := every
	if sleep == 0 {
		if last != nil && time.Now().After(b.deadline) {
			return fmt.Errorf("%w: %w", retry.ErrBudgetExhausted, last)
		}
		sleep = time.Duration(rand.Int64N(int64(b.next) + 1))
		b.next = min(b.next*2, b.p.Max)
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(sleep):
		return nil
	}
}

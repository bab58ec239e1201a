package live

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"crucible.dev/crucible/internal/retry"
)

// ErrSlowViewer ends a viewer whose buffer filled up (in lines or bytes),
// or whose backlog the history dropped before it was read: it fell behind
// the others and was dropped so that they are never held back.
var ErrSlowViewer = errors.New("viewer too slow: dropped; reconnect with Last-Event-ID")

// ErrGone is wrapped by a Source's errors when the pod no longer exists.
var ErrGone = errors.New("pod gone")

// Status is where a pod's container is in its life.
type Status struct {
	// Started: the container runs or ran, so its log can be read.
	Started bool
	// Finished: the container ended (or the pod is gone); its log is whole.
	Finished bool
}

// Source is one pod's log upstream.
type Source interface {
	// Status reports whether the container started and finished.
	Status(ctx context.Context) (Status, error)
	// Open reads the log with a timestamp on every line, from since (zero:
	// the start; the API server rounds it down to the second), following
	// new lines while follow.
	Open(ctx context.Context, since time.Time, follow bool) (io.ReadCloser, error)
}

// Key names a pod.
type Key struct{ Cluster, Namespace, Pod string }

// Options tune a Hub. Buffer, BufferBytes, History, HistoryBytes and Poll
// are the profile's [live] section and Retry its [reconcile] policy,
// defaults applied by package profile (profile.Default().Live in tests):
// NewHub refuses a zero one rather than pick a value of its own. Log is no
// profile setting: nil discards.
//
// The byte bounds are what bound memory: a line costs its text, its Event
// and lineOverhead, so a stream holds at most HistoryBytes and each viewer at
// most BufferBytes plus one line, however long the lines a pod prints.
type Options struct {
	// Buffer is how many lines a viewer may fall behind before it is
	// dropped ([live] buffer).
	Buffer int
	// BufferBytes is how many bytes of lines a viewer may fall behind
	// before it is dropped ([live] viewer_buffer_bytes).
	BufferBytes int64
	// History is how many recent lines a stream keeps for viewers joining
	// late ([live] history); older lines are only in the artifact later.
	History int
	// HistoryBytes bounds the same history in bytes ([live]
	// history_bytes).
	HistoryBytes int64
	// ReadRate is how many bytes a second a pod's log is read upstream
	// ([live] read_bytes_per_second).
	ReadRate int64
	// Poll is how often a pending pod, and a followed pod's end, are
	// checked ([live] poll_interval).
	Poll time.Duration
	// Retry bounds reconnecting after transient upstream errors; the
	// budget counts from the last line or successful open.
	Retry retry.Policy
	// Render, when set, makes each line's Event once, as the stream
	// publishes it: every viewer of a pod is sent the same bytes, and a
	// 64 KiB line a hundred viewers read is encoded once instead of a
	// hundred times, each on the viewer's goroutine, all at once.
	Render func(Line) string
	Log    *slog.Logger
}

// validate reports every zero or negative bound at once.
func (o Options) validate() error {
	var errs []error
	for _, f := range []struct {
		name string
		bad  bool
	}{
		{"Buffer", o.Buffer <= 0},
		{"BufferBytes", o.BufferBytes <= 0},
		{"History", o.History <= 0},
		{"HistoryBytes", o.HistoryBytes <= 0},
		{"ReadRate", o.ReadRate <= 0},
		{"Poll", o.Poll <= 0},
		{"Retry", o.Retry.Initial <= 0 || o.Retry.Max <= 0 || o.Retry.Budget <= 0},
	} {
		if f.bad {
			errs = append(errs, fmt.Errorf("%s: must be positive (the profile's defaults are package profile's)", f.name))
		}
	}
	return errors.Join(errs...)
}

// Hub shares one upstream stream per pod among its viewers.
type Hub struct {
	opts    Options
	source  func(Key) Source
	mu      sync.Mutex
	streams map[Key]*stream
	// held is the bytes of lines in streams' histories and viewers' queues.
	held atomic.Int64
}

// NewHub returns a hub that reads pods' logs from source(key). It does no
// I/O: a pod's stream opens with its first viewer.
func NewHub(source func(Key) Source, opts Options) (*Hub, error) {
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("live log options: %w", err)
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	return &Hub{opts: opts, source: source, streams: map[Key]*stream{}}, nil
}

// Streams is the number of upstream streams open or opening now.
func (h *Hub) Streams() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.streams)
}

// Held is how many bytes of lines the hub holds now: every stream's
// history and every viewer's queue, each line at its cost (lineCost). It
// is what the byte budgets bound.
func (h *Hub) Held() int64 { return h.held.Load() }

// lineOverhead is what a line costs beyond its text and event: its Line
// value in a history and a queue, roughly.
const lineOverhead = 64

func lineCost(l Line) int64 { return int64(len(l.Text)+len(l.Event)) + lineOverhead }

// Subscribe adds a viewer of key's log that receives the lines numbered
// after `after` (0: from the first line the stream still holds), then the
// live ones. Close the viewer when done.
func (h *Hub) Subscribe(key Key, after int64) *Viewer {
	h.mu.Lock()
	defer h.mu.Unlock()
	for {
		s, ok := h.streams[key]
		if !ok {
			s = newStream(h, key)
			h.streams[key] = s
		}
		if v := s.add(after); v != nil {
			return v
		}
		delete(h.streams, key) // ended, not yet released
	}
}

// release forgets s once it has no viewers or has ended.
func (h *Hub) release(s *stream) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.streams[s.key] == s {
		delete(h.streams, s.key)
	}
}

// Viewer receives one client's lines: first its backlog, the lines the
// stream's history had when it joined (read from the history as it goes, so
// a backlog costs nothing of its own), then its queue of the lines published
// since.
type Viewer struct {
	s *stream
	// next..joinLast are the backlog's line numbers still to read.
	next, joinLast int64
	ch             chan Line
	queued         atomic.Int64 // bytes in ch
	after          int64        // lines up to this number were delivered before (Last-Event-ID)
	err            error        // set before ch is closed: nil means the pod ended
	lost           bool         // the history dropped backlog lines before they were read
	once           sync.Once
}

// Next returns the next line. At the end it returns io.EOF when the pod
// finished (its whole log delivered), ErrSlowViewer, or the upstream's
// error; ctx ending returns ctx.Err().
func (v *Viewer) Next(ctx context.Context) (Line, error) {
	for {
		l, ok, err := v.take(ctx, true)
		if err != nil || ok && l.N > v.after {
			return l, err
		}
	}
}

// TryNext returns the next line if one is ready, without waiting: a writer
// drains what is ready, then flushes once, then waits with Next.
func (v *Viewer) TryNext() (Line, bool, error) {
	for {
		l, ok, err := v.take(context.Background(), false)
		if !ok || l.N > v.after {
			return l, ok, err
		}
	}
}

// take returns the next backlog line, else the next queued one; with wait
// it waits for one (or ctx), without it ok is false when none is ready.
func (v *Viewer) take(ctx context.Context, wait bool) (Line, bool, error) {
	if v.lost {
		return Line{}, false, ErrSlowViewer
	}
	if v.next <= v.joinLast {
		l, ok := v.s.at(v.next)
		if !ok {
			// Lines were published faster than this viewer read its
			// backlog: the history let go of them.
			v.lost = true
			v.s.drop(v)
			return Line{}, false, ErrSlowViewer
		}
		v.next++
		return l, true, nil
	}
	if !wait {
		select {
		case l, ok := <-v.ch:
			return v.received(l, ok)
		default:
			return Line{}, false, nil
		}
	}
	select {
	case l, ok := <-v.ch:
		return v.received(l, ok)
	case <-ctx.Done():
		return Line{}, false, ctx.Err()
	}
}

// received is what taking l from the queue means; !ok: the queue closed.
func (v *Viewer) received(l Line, ok bool) (Line, bool, error) {
	switch {
	case ok:
		v.release(l)
		return l, true, nil
	case v.err == nil:
		return Line{}, false, io.EOF
	default:
		return Line{}, false, v.err
	}
}

// release uncounts a line taken from the queue.
func (v *Viewer) release(l Line) {
	c := lineCost(l)
	v.queued.Add(-c)
	v.s.hub.held.Add(-c)
}

// Close leaves the stream and frees the viewer's queue; the last viewer
// leaving closes the upstream.
func (v *Viewer) Close() {
	v.once.Do(func() {
		v.s.remove(v)
		// Nothing is sent to v any more: what is queued is all there is.
		for {
			select {
			case l, ok := <-v.ch:
				if !ok {
					return
				}
				v.release(l)
			default:
				return
			}
		}
	})
}

package live

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"crucible.dev/crucible/internal/retry"
)

// ErrSlowViewer ends a viewer whose buffer filled up: it fell behind the
// others and was dropped so that they are never held back.
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

// Options tune a Hub. Buffer, History and Poll are the profile's [live]
// section and Retry its [reconcile] policy, defaults applied by package
// fleet (fleet.Default().Live in tests): NewHub refuses a zero one rather
// than pick a value of its own. Log is no profile setting: nil discards.
type Options struct {
	// Buffer is how many lines a viewer may fall behind before it is
	// dropped ([live] buffer).
	Buffer int
	// History is how many recent lines a stream keeps for viewers joining
	// late ([live] history); older lines are only in the artifact later.
	History int
	// Poll is how often a pending pod, and a followed pod's end, are
	// checked ([live] poll_interval).
	Poll time.Duration
	// Retry bounds reconnecting after transient upstream errors; the
	// budget counts from the last line or successful open.
	Retry retry.Policy
	Log   *slog.Logger
}

// validate reports every zero or negative bound at once.
func (o Options) validate() error {
	var errs []error
	for _, f := range []struct {
		name string
		bad  bool
	}{
		{"Buffer", o.Buffer <= 0},
		{"History", o.History <= 0},
		{"Poll", o.Poll <= 0},
		{"Retry", o.Retry.Initial <= 0 || o.Retry.Max <= 0 || o.Retry.Budget <= 0},
	} {
		if f.bad {
			errs = append(errs, fmt.Errorf("%s: must be positive (the profile's defaults are fleet's)", f.name))
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

// Viewer receives one client's lines.
type Viewer struct {
	s *stream
	// backlog holds the lines the stream had when the viewer joined; they
	// are read before ch. It shares the stream's immutable history.
	backlog []Line
	ch      chan Line
	after   int64 // lines up to this number were delivered before (Last-Event-ID)
	err     error // set before ch is closed: nil means the pod ended
	once    sync.Once
}

// Next returns the next line. At the end it returns io.EOF when the pod
// finished (its whole log delivered), ErrSlowViewer, or the upstream's
// error; ctx ending returns ctx.Err().
func (v *Viewer) Next(ctx context.Context) (Line, error) {
	for {
		l, err := v.next(ctx)
		if err != nil || l.N > v.after {
			return l, err
		}
	}
}

func (v *Viewer) next(ctx context.Context) (Line, error) {
	if len(v.backlog) > 0 {
		l := v.backlog[0]
		v.backlog = v.backlog[1:]
		return l, nil
	}
	select {
	case l, ok := <-v.ch:
		if ok {
			return l, nil
		}
		if v.err == nil {
			return Line{}, io.EOF
		}
		return Line{}, v.err
	case <-ctx.Done():
		return Line{}, ctx.Err()
	}
}

// Close leaves the stream; the last viewer leaving closes the upstream.
func (v *Viewer) Close() {
	v.once.Do(func() {
		v.backlog = nil
		v.s.remove(v)
	})
}

// TryNext returns the next line if one is ready, without waiting: a writer
// drains what is ready, then flushes once, then waits with Next.
func (v *Viewer) TryNext() (Line, bool, error) {
	for {
		l, ok, err := v.tryNext()
		if !ok || l.N > v.after {
			return l, ok, err
		}
	}
}

func (v *Viewer) tryNext() (Line, bool, error) {
	if len(v.backlog) > 0 {
		l := v.backlog[0]
		v.backlog = v.backlog[1:]
		return l, true, nil
	}
	select {
	case l, ok := <-v.ch:
		if ok {
			return l, true, nil
		}
		if v.err == nil {
			return Line{}, false, io.EOF
		}
		return Line{}, false, v.err
	default:
		return Line{}, false, nil
	}
}

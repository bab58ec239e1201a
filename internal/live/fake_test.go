package live

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"
	"time"
)

// fakeSource is a pod's log upstream in memory: the test appends lines,
// breaks open streams, and starts and finishes the container.
type fakeSource struct {
	mu       sync.Mutex
	lines    []string // "TS text", as pods/log?timestamps=true sends them
	started  bool
	finished bool
	openErr  error
	changed  chan struct{} // closed and replaced on every change
	opens    int           // follow opens
	reads    int           // non-follow opens
	open     map[*fakeStream]struct{}
	closedAt int // streams closed by their reader
	// lag is how many more status reads still say running after the
	// container finished, as a kubelet writes the status after the exit.
	lag int
}

type fakeStream struct {
	pr *io.PipeReader
	pw *io.PipeWriter
}

func newFake() *fakeSource {
	return &fakeSource{changed: make(chan struct{}), open: map[*fakeStream]struct{}{}}
}

func (f *fakeSource) notify() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// add appends lines, all stamped ts.
func (f *fakeSource) add(ts time.Time, texts ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, t := range texts {
		f.lines = append(f.lines, ts.UTC().Format(time.RFC3339Nano)+" "+t)
	}
	f.notify()
}

func (f *fakeSource) set(started, finished bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.started, f.finished = started, finished
	f.notify()
}

// breakStreams ends every open stream with a connection reset, or with
// the opaque error an HTTP/2 GOAWAY gives.
func (f *fakeSource) breakStreams(goaway ...bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	err := fmt.Errorf("read: %w", syscall.ECONNRESET)
	if len(goaway) > 0 {
		err = errors.New("http2: server sent GOAWAY and closed the connection")
	}
	for s := range f.open {
		s.pw.CloseWithError(err)
		delete(f.open, s)
	}
}

func (f *fakeSource) counts() (opens, reads, open int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.opens, f.reads, len(f.open)
}

func (f *fakeSource) Status(context.Context) (Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.finished && f.lag > 0 {
		f.lag--
		return Status{Started: true}, nil
	}
	return Status{Started: f.started || f.finished, Finished: f.finished}, nil
}

// exit finishes the container the way a kubelet shows it: every open
// stream ends cleanly at once, and the next lag status reads still say
// running.
func (f *fakeSource) exit(lag int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.finished, f.lag = true, lag
	for s := range f.open {
		s.pw.Close()
		delete(f.open, s)
	}
	f.notify()
}

func (f *fakeSource) Open(ctx context.Context, since time.Time, follow bool) (io.ReadCloser, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.openErr != nil {
		return nil, f.openErr
	}
	if follow {
		f.opens++
	} else {
		f.reads++
	}
	pr, pw := io.Pipe()
	s := &fakeStream{pr: pr, pw: pw}
	f.open[s] = struct{}{}
	go f.serve(ctx, s, since, follow)
	return pr, nil
}

// serve writes the lines from since, then (following) new ones as they come.
func (f *fakeSource) serve(ctx context.Context, s *fakeStream, since time.Time, follow bool) {
	next := 0
	for {
		f.mu.Lock()
		batch := f.lines[next:]
		next = len(f.lines)
		changed, finished := f.changed, f.finished
		f.mu.Unlock()
		for _, l := range batch {
			ts, _, _ := parseTimestamped(l)
			if ts.Before(since) {
				continue
			}
			if _, err := io.WriteString(s.pw, l+"\n"); err != nil {
				f.drop(s)
				return
			}
		}
		if !follow || finished {
			s.pw.Close()
			f.drop(s)
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			s.pw.CloseWithError(ctx.Err())
			f.drop(s)
			return
		}
	}
}

func (f *fakeSource) drop(s *fakeStream) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.open[s]; ok {
		delete(f.open, s)
		f.closedAt++
	}
}

var errPermanent = errors.New("forbidden")

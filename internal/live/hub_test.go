package live

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/wait"

	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/retry"
)

var fastRetry = retry.Policy{Initial: 5 * time.Millisecond, Max: 20 * time.Millisecond, Budget: 5 * time.Second}

func newTestHub(t *testing.T, f *fakeSource, buffer int) *Hub {
	t.Helper()
	h, err := NewHub(func(Key) Source { return f }, Options{Buffer: buffer, BufferBytes: profile.DefaultLiveViewerBufferBytes,
		History: profile.DefaultLiveHistory, HistoryBytes: profile.DefaultLiveHistoryBytes, ReadRate: profile.DefaultLiveReadBytesPerSecond,
		Poll: 10 * time.Millisecond, Retry: fastRetry})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// The hub has no defaults of its own: every zero bound is refused at once
// (the profile's [live] defaults are package profile's).
func TestNewHubRefusesZeroBounds(t *testing.T) {
	_, err := NewHub(func(Key) Source { return nil }, Options{Buffer: -1, Retry: retry.Policy{Initial: time.Second}})
	const fleets = ": must be positive (the profile's defaults are package profile's)"
	want := "live log options: Buffer" + fleets + "\nBufferBytes" + fleets + "\nHistory" + fleets + "\nHistoryBytes" + fleets + "\nReadRate" + fleets +
		"\nPoll" + fleets + "\nRetry" + fleets
	if err == nil || err.Error() != want {
		t.Errorf("NewHub error = %v, want %q", err, want)
	}
}

var key = Key{Cluster: "wharf", Namespace: "loops", Pod: "turn-1"}

// readAll reads v to its end and returns the texts and the final error.
func readAll(t *testing.T, v *Viewer) ([]string, []int64, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var texts []string
	var ns []int64
	for {
		l, err := v.Next(ctx)
		if err != nil {
			return texts, ns, err
		}
		texts = append(texts, l.Text)
		ns = append(ns, l.N)
	}
}

func texts(prefix string, n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("%s%d", prefix, i))
	}
	return out
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 2*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("timed out waiting for %s", what)
	}
}

func TestFanOutOneUpstream(t *testing.T) {
	f := newFake()
	f.set(true, false)
	h := newTestHub(t, f, 256)
	const viewers = 50
	var vs []*Viewer
	for range viewers {
		vs = append(vs, h.Subscribe(key, 0))
	}
	want := texts("line ", 100)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	go func() {
		for i, text := range want {
			f.add(base.Add(time.Duration(i/3)*time.Millisecond), text) // equal timestamps in threes
		}
		f.set(true, true)
	}()
	var wg sync.WaitGroup
	for _, v := range vs {
		wg.Go(func() {
			defer v.Close()
			got, ns, err := readAll(t, v)
			if !errors.Is(err, io.EOF) {
				t.Errorf("end: %v, want io.EOF", err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("lines (-want +got):\n%s", diff)
			}
			if len(ns) > 0 && (ns[0] != 1 || ns[len(ns)-1] != int64(len(want))) {
				t.Errorf("numbers run %d..%d, want 1..%d", ns[0], ns[len(ns)-1], len(want))
			}
		})
	}
	wg.Wait()
	opens, _, open := f.counts()
	if opens != 1 {
		t.Errorf("%d follow streams opened for %d viewers, want 1", opens, viewers)
	}
	waitFor(t, "upstream closed", func() bool { _, _, open := f.counts(); return open == 0 && h.Streams() == 0 })
	_ = open
}

func TestSlowViewerIsDroppedOthersUnaffected(t *testing.T) {
	f := newFake()
	f.set(true, false)
	h := newTestHub(t, f, 4)
	slow := h.Subscribe(key, 0)
	defer slow.Close()
	fast := h.Subscribe(key, 0)
	defer fast.Close()
	want := texts("l", 40)
	done := make(chan []string)
	var read atomic.Int64 // lines the fast viewer has taken
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		var got []string
		for {
			l, err := fast.Next(ctx)
			if err != nil {
				if !errors.Is(err, io.EOF) {
					t.Errorf("fast viewer ended with %v, want io.EOF", err)
				}
				done <- got
				return
			}
			got = append(got, l.Text)
			read.Add(1)
		}
	}()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, text := range want {
		f.add(base.Add(time.Duration(i)*time.Second), text)
		// Let the fast viewer take each line before the next is written
		// (the slow one never reads): on a busy machine the hub may
		// otherwise hand it several at once and fill its buffer.
		waitFor(t, "line taken", func() bool { return read.Load() == int64(i+1) })
	}
	f.set(true, true)
	if diff := cmp.Diff(want, <-done); diff != "" {
		t.Errorf("fast viewer (-want +got):\n%s", diff)
	}
	got, _, err := readAll(t, slow)
	if !errors.Is(err, ErrSlowViewer) {
		t.Errorf("slow viewer ended with %v, want ErrSlowViewer", err)
	}
	if diff := cmp.Diff(want[:4], got); diff != "" {
		t.Errorf("slow viewer got its buffer (-want +got):\n%s", diff)
	}
}

// The upstream breaks twice, once between lines of one timestamp and once
// between seconds; the reopen (from the second, as the API server rounds)
// repeats lines, which are dropped: every line exactly once, in order.
func TestReconnectDeliversEveryLineOnce(t *testing.T) {
	f := newFake()
	f.set(true, false)
	h := newTestHub(t, f, 1024)
	v := h.Subscribe(key, 0)
	defer v.Close()
	base := time.Date(2026, 1, 1, 0, 0, 0, 500, time.UTC)
	f.add(base, "a", "same", "same")
	f.add(base.Add(300*time.Millisecond), "b")
	waitFor(t, "4 lines read", func() bool { return len(v.ch) == 4 })
	f.breakStreams()
	f.add(base.Add(300*time.Millisecond), "same-ts-after-break", "b")
	f.add(base.Add(1200*time.Millisecond), "c")
	waitFor(t, "reopened", func() bool { o, _, _ := f.counts(); return o == 2 })
	waitFor(t, "7 lines read", func() bool { return len(v.ch) == 7 })
	f.breakStreams(true)
	f.add(base.Add(1200*time.Millisecond), "c")
	f.add(base.Add(2*time.Second), "d")
	waitFor(t, "reopened again", func() bool { o, _, _ := f.counts(); return o == 3 })
	f.set(true, true)
	got, ns, err := readAll(t, v)
	if !errors.Is(err, io.EOF) {
		t.Fatalf("end: %v", err)
	}
	want := []string{"a", "same", "same", "b", "same-ts-after-break", "b", "c", "c", "d"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("lines (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int64{1, 2, 3, 4, 5, 6, 7, 8, 9}, ns); diff != "" {
		t.Errorf("numbers (-want +got):\n%s", diff)
	}
}

// A container's exit ends the follow stream cleanly before its status says
// so: the pod is read once more when it shows finished, not followed again
// for every moment of that lag (the e2e test of 200 viewers saw a fourth
// pods/log request so).
func TestExitIsDrainedNotReopened(t *testing.T) {
	f := newFake()
	f.set(true, false)
	h := newTestHub(t, f, 1024)
	v := h.Subscribe(key, 0)
	defer v.Close()
	f.add(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), "a", "b")
	waitFor(t, "2 lines read", func() bool { return len(v.ch) == 2 })
	f.exit(1)
	got, _, err := readAll(t, v)
	if !errors.Is(err, io.EOF) {
		t.Fatalf("end: %v", err)
	}
	if diff := cmp.Diff([]string{"a", "b"}, got); diff != "" {
		t.Errorf("lines (-want +got):\n%s", diff)
	}
	if opens, reads, _ := f.counts(); opens != 1 || reads != 1 {
		t.Errorf("%d follow opens and %d reads, want the one follow and one read of the finished log", opens, reads)
	}
}

func TestLastViewerLeavingClosesUpstream(t *testing.T) {
	f := newFake()
	f.set(true, false)
	h := newTestHub(t, f, 16)
	a, b := h.Subscribe(key, 0), h.Subscribe(key, 0)
	f.add(time.Now(), "x")
	waitFor(t, "upstream open", func() bool { _, _, open := f.counts(); return open == 1 })
	a.Close()
	if _, _, open := f.counts(); open != 1 || h.Streams() != 1 {
		t.Errorf("one viewer left of two: %d upstreams open, %d streams; want 1, 1", open, h.Streams())
	}
	b.Close()
	b.Close() // twice is harmless
	waitFor(t, "upstream closed", func() bool { _, _, open := f.counts(); return open == 0 })
	if h.Streams() != 0 {
		t.Errorf("%d streams after the last viewer left, want 0", h.Streams())
	}
	// A new viewer opens a new upstream and reads from the start.
	c := h.Subscribe(key, 0)
	defer c.Close()
	l, err := c.Next(t.Context())
	if err != nil || l.Text != "x" || l.N != 1 {
		t.Errorf("new viewer: %+v %v, want line 1 x", l, err)
	}
}

func TestPendingPodWaitsThenStreams(t *testing.T) {
	f := newFake()
	h := newTestHub(t, f, 16)
	v := h.Subscribe(key, 0)
	defer v.Close()
	time.Sleep(50 * time.Millisecond) // several polls while pending
	if o, _, _ := f.counts(); o != 0 {
		t.Fatalf("log opened %d times before the container started", o)
	}
	f.add(time.Now(), "first")
	f.set(true, false)
	l, err := v.Next(t.Context())
	if err != nil || l.Text != "first" {
		t.Fatalf("got %+v %v", l, err)
	}
	f.set(true, true)
	if _, _, err := readAll(t, v); !errors.Is(err, io.EOF) {
		t.Errorf("end: %v", err)
	}
}

func TestLateViewerGetsHistoryAfterID(t *testing.T) {
	f := newFake()
	f.set(true, false)
	h := newTestHub(t, f, 16)
	first := h.Subscribe(key, 0)
	defer first.Close()
	base := time.Now()
	f.add(base, "1", "2", "3")
	waitFor(t, "3 lines", func() bool { return len(first.ch) == 3 })
	late := h.Subscribe(key, 2) // Last-Event-ID: 2
	defer late.Close()
	f.add(base.Add(time.Second), "4")
	f.set(true, true)
	got, ns, err := readAll(t, late)
	if !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"3", "4"}, got); diff != "" || ns[0] != 3 {
		t.Errorf("late viewer (-want +got):\n%s numbers %v", diff, ns)
	}
}

func TestPermanentErrorEndsViewers(t *testing.T) {
	f := newFake()
	f.set(true, false)
	f.openErr = errPermanent
	h := newTestHub(t, f, 16)
	v := h.Subscribe(key, 0)
	defer v.Close()
	if _, _, err := readAll(t, v); !errors.Is(err, errPermanent) {
		t.Errorf("end: %v, want the upstream's error", err)
	}
}

func TestFinishedPodGoneIsTheEnd(t *testing.T) {
	f := newFake()
	f.set(true, true)
	f.add(time.Now(), "only")
	h := newTestHub(t, f, 16)
	v := h.Subscribe(key, 0)
	defer v.Close()
	got, _, err := readAll(t, v)
	if !errors.Is(err, io.EOF) || strings.Join(got, ",") != "only" {
		t.Errorf("got %v %v", got, err)
	}
}

// A restarted API server answers 403 until its authorizer synced: after a
// broken stream such answers are retried, and no line is lost.
func TestReconnectRetriesForbiddenWhileRecovering(t *testing.T) {
	f := newFake()
	f.set(true, false)
	h := newTestHub(t, f, 64)
	v := h.Subscribe(key, 0)
	defer v.Close()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.add(base, "before")
	waitFor(t, "first line", func() bool { return len(v.ch) == 1 })
	f.mu.Lock()
	f.openErr = errPermanent
	f.mu.Unlock()
	f.breakStreams()
	f.add(base.Add(time.Second), "during")
	time.Sleep(50 * time.Millisecond) // several refused reopens
	f.mu.Lock()
	f.openErr = nil
	f.mu.Unlock()
	waitFor(t, "reopened", func() bool { o, _, _ := f.counts(); return o == 2 })
	f.set(true, true)
	got, _, err := readAll(t, v)
	if !errors.Is(err, io.EOF) || strings.Join(got, ",") != "before,during" {
		t.Errorf("got %v %v", got, err)
	}
}

// A viewer resuming (Last-Event-ID) on a stream that starts afresh gets
// only the lines after its id, however they arrive.
func TestResumeOnNewStreamSkipsDeliveredLines(t *testing.T) {
	f := newFake()
	f.set(true, false)
	base := time.Now()
	f.add(base, "1", "2", "3")
	h := newTestHub(t, f, 16)
	v := h.Subscribe(key, 2)
	defer v.Close()
	f.add(base.Add(time.Second), "4")
	f.set(true, true)
	got, ns, err := readAll(t, v)
	if !errors.Is(err, io.EOF) || strings.Join(got, ",") != "3,4" || ns[0] != 3 {
		t.Errorf("got %v numbered %v, %v; want 3,4 from line 3", got, ns, err)
	}
}

// Render makes a line's event once, however many viewers it has: each gets
// the same Event beside the line, and the hub counts the event's bytes in
// what it holds (the byte budgets bound the text and the event together).
func TestRenderOncePerLine(t *testing.T) {
	f := newFake()
	f.set(true, false)
	var renders atomic.Int64
	h, err := NewHub(func(Key) Source { return f }, Options{Buffer: 256, BufferBytes: profile.DefaultLiveViewerBufferBytes,
		History: profile.DefaultLiveHistory, HistoryBytes: profile.DefaultLiveHistoryBytes, ReadRate: profile.DefaultLiveReadBytesPerSecond,
		Poll: 10 * time.Millisecond, Retry: fastRetry, Render: func(l Line) string {
			renders.Add(1)
			return fmt.Sprintf("event %d: %s", l.N, l.Text)
		}})
	if err != nil {
		t.Fatal(err)
	}
	const viewers, lines = 20, 30
	var vs []*Viewer
	for range viewers {
		vs = append(vs, h.Subscribe(key, 0))
	}
	want := texts("line ", lines)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, text := range want {
		f.add(base.Add(time.Duration(i)*time.Millisecond), text)
	}
	waitFor(t, "every line published", func() bool { return h.published(key) == lines })
	// Held: the history and the viewers' queues (none read yet), each line
	// at its text, its event and the overhead.
	var perLine int64
	for i, text := range want {
		perLine += int64(len(text)+len(fmt.Sprintf("event %d: %s", i+1, text))) + lineOverhead
	}
	if got, wantHeld := h.Held(), perLine*(1+viewers); got != wantHeld {
		t.Errorf("held %d bytes, want %d (text, event and overhead of %d lines, in the history and %d queues)", got, wantHeld, lines, viewers)
	}
	f.set(true, true)
	for _, v := range vs {
		for i := range lines {
			l, err := v.Next(t.Context())
			if err != nil {
				t.Fatalf("line %d: %v", i+1, err)
			}
			if wantEvent := fmt.Sprintf("event %d: %s", l.N, want[i]); l.Text != want[i] || l.Event != wantEvent {
				t.Fatalf("line %d: text %q event %q, want %q and %q", i+1, l.Text, l.Event, want[i], wantEvent)
			}
		}
		v.Close()
	}
	if got := renders.Load(); got != lines {
		t.Errorf("rendered %d times for %d lines and %d viewers, want once a line", got, lines, viewers)
	}
}

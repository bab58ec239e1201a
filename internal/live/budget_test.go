package live

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"crucible.dev/crucible/internal/profile"
)

// Budgets of the byte tests: small against 60 KB lines, so a few lines
// reach them.
const (
	testHistoryBytes = 1 << 20
	testBufferBytes  = 256 << 10
	longText         = 60000
)

// newBudgetHub is a hub whose line counts are the profile's defaults (far
// above what the tests print) and whose byte budgets are the tests'; its
// upstream is not paced (pace_test.go tests that), so that the budgets
// alone decide.
func newBudgetHub(t *testing.T, f *fakeSource) *Hub {
	t.Helper()
	d := profile.Default().Live
	h, err := NewHub(func(Key) Source { return f }, Options{Buffer: d.Buffer, BufferBytes: testBufferBytes,
		History: d.History, HistoryBytes: testHistoryBytes, ReadRate: 1 << 40, Poll: 10 * time.Millisecond, Retry: fastRetry})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// longLine is line i of the tests' pod: longText bytes ending in its number.
func longLine(i int) string {
	n := fmt.Sprintf("%08d", i)
	return strings.Repeat("x", longText-len(n)) + n
}

// R-B1: a pod printing long lines to one viewer that keeps up and one that
// never reads. The hub holds at most its history's budget plus each
// viewer's (and one line over each); the one that does not read is dropped
// once its queue passed its budget, and closing it frees its queue; the
// other gets every line.
func TestLongLinesHeldWithinByteBudgets(t *testing.T) {
	f := newFake()
	f.set(true, false)
	h := newBudgetHub(t, f)
	reader := h.Subscribe(key, 0)
	defer reader.Close()
	stuck := h.Subscribe(key, 0)
	defer stuck.Close()
	const lines = 200
	cost := int64(longText + lineOverhead)
	bound := testHistoryBytes + 2*(testBufferBytes+cost)

	// The reading viewer hands over each line once Next has returned it,
	// and so uncounted it: after a line is handed over, the hub holds
	// nothing of it for this viewer (its queue being empty is not enough:
	// a line leaves the queue just before it is uncounted).
	taken, ended := make(chan string), make(chan error, 1)
	go func() {
		for {
			l, err := reader.Next(t.Context())
			if err != nil {
				ended <- err
				return
			}
			select {
			case taken <- l.Text:
			case <-t.Context().Done(): // the test failed and left
				return
			}
		}
	}()
	var want, got []string
	peak := int64(0)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range lines {
		want = append(want, longLine(i))
		f.add(base.Add(time.Duration(i)*time.Millisecond), longLine(i))
		// One line at a time, so that the reader never falls behind.
		waitFor(t, "line published", func() bool { return h.published(key) == int64(i+1) })
		peak = max(peak, h.Held())
		select {
		case text := <-taken:
			got = append(got, text)
		case err := <-ended:
			t.Fatalf("the reading viewer ended after %d lines: %v", len(got), err)
		case <-time.After(10 * time.Second):
			t.Fatalf("line %d not taken within 10s", i)
		}
	}
	if peak > bound {
		t.Errorf("the hub held %d bytes at its peak, want at most %d (history %d + 2 viewers × (%d + a line))", peak, bound, testHistoryBytes, testBufferBytes)
	}
	stuckGot, _, err := readAll(t, stuck)
	if !errors.Is(err, ErrSlowViewer) {
		t.Errorf("the viewer that never read ended with %v, want ErrSlowViewer", err)
	}
	if maxLines := int(testBufferBytes/cost) + 1; len(stuckGot) > maxLines {
		t.Errorf("the viewer that never read had %d lines queued, want at most %d (its byte budget)", len(stuckGot), maxLines)
	}
	stuck.Close()
	if held, hist := h.Held(), int64(testHistoryBytes); held > hist {
		t.Errorf("after the stuck viewer closed the hub holds %d bytes, want at most its history's %d", held, hist)
	}
	f.set(true, true)
	select {
	case err := <-ended:
		if !errors.Is(err, io.EOF) {
			t.Errorf("reading viewer ended with %v, want io.EOF", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the reading viewer did not end within 10s of the pod's end")
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the reading viewer (-want +got):\n%s", diff)
	}
	reader.Close()
	waitFor(t, "stream gone", func() bool { return h.Streams() == 0 })
	if held := h.Held(); held != 0 {
		t.Errorf("with no stream left the hub holds %d bytes, want 0", held)
	}
}

// The history keeps the newest lines that fit its byte budget: a viewer
// joining after 200 lines of 60 KB gets the last 17 (17 × 60,064 bytes fit
// in 1 MiB, 18 do not), not the 200 the line count allows.
func TestHistoryBoundedInBytes(t *testing.T) {
	f := newFake()
	f.set(true, false)
	h := newBudgetHub(t, f)
	first := h.Subscribe(key, 0)
	defer first.Close()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 200 {
		f.add(base.Add(time.Duration(i)*time.Millisecond), longLine(i))
	}
	waitFor(t, "200 lines published", func() bool { return h.published(key) == 200 })
	late := h.Subscribe(key, 0)
	defer late.Close()
	f.set(true, true)
	got, ns, err := readAll(t, late)
	if !errors.Is(err, io.EOF) {
		t.Fatalf("late viewer ended with %v, want io.EOF", err)
	}
	var want []string
	for i := 183; i < 200; i++ {
		want = append(want, longLine(i))
	}
	if diff := cmp.Diff(want, got); diff != "" || len(ns) == 0 || ns[0] != 184 {
		t.Errorf("late viewer got %d lines from %v, want lines 184..200 (-want +got):\n%s", len(got), ns[:min(1, len(ns))], diff)
	}
}

// published is the number of the last line key's stream published.
func (h *Hub) published(k Key) int64 {
	h.mu.Lock()
	s := h.streams[k]
	h.mu.Unlock()
	if s == nil {
		return -1
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

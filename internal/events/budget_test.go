package events

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/store"
)

// bigPod is a row whose reason (the spoke's words) is n bytes long.
func bigPod(id string, n int) store.WorkPod {
	p := pod(id, store.StateFailed)
	p.Reason = strings.Repeat("r", n)
	return p
}

// costOf is what a change of p costs the bus, as Publish counts it.
func costOf(p store.WorkPod) int64 {
	p.Spec = nil
	return changeCost(p)
}

// R-B1: a subscriber's queue is bounded in bytes as well as in changes: a
// few large rows drop a subscriber that is nowhere near [events] queue
// changes behind, and free what it held; rows up to the bound exactly are
// all delivered.
func TestBusQueueOverflowsByBytesBeforeCount(t *testing.T) {
	large := bigPod("a", 16<<10)
	limit := 3 * costOf(large)
	b := newBus(t, func(e *profile.Events) { e.Queue, e.QueueBytes = 1024, limit })

	fits, _ := b.Subscribe("")
	defer fits.Close()
	for _, id := range []string{"a", "b", "c"} {
		b.Publish(bigPod(id, 16<<10))
	}
	if diff := cmp.Diff([]string{"a/failed", "b/failed", "c/failed"}, ids(next(t, fits), next(t, fits), next(t, fits))); diff != "" {
		t.Fatalf("a queue of exactly queue_bytes (-want +got):\n%s", diff)
	}

	slow, _ := b.Subscribe("")
	defer slow.Close()
	for _, id := range []string{"d", "e", "f", "g"} {
		b.Publish(bigPod(id, 16<<10))
		if got := next(t, fits).Pod.ID; got != id { // one that keeps up is never dropped
			t.Fatalf("the subscriber that keeps up got %q, want %q", got, id)
		}
	}
	slow.mu.Lock()
	held, queued := slow.queueBytes, len(slow.queue)
	slow.mu.Unlock()
	if queued != 0 || held != 0 {
		t.Errorf("the dropped subscriber still holds %d changes, %d bytes", queued, held)
	}
	if _, err := slow.Next(t.Context()); !errors.Is(err, ErrOverflow) {
		t.Fatalf("Next after 4 rows of %d bytes with queue_bytes %d: %v, want ErrOverflow", costOf(large), limit, err)
	}
}

// R-B1: the history is bounded in bytes as well as in changes: large rows
// drop the oldest, a resume from a change still held replays the rest, and
// one from a change dropped, even when nothing at all is held any more, is
// a reset.
func TestBusHistoryDropsOldestByBytes(t *testing.T) {
	large := costOf(bigPod("a", 16<<10))
	b := newBus(t, func(e *profile.Events) { e.History, e.HistoryBytes = 1024, 2*large })
	for _, id := range []string{"a", "b", "c"} {
		b.Publish(bigPod(id, 16<<10))
	}
	var held []string
	for _, c := range b.ring {
		held = append(held, c.Pod.ID)
	}
	if diff := cmp.Diff([]string{"b", "c"}, held); diff != "" {
		t.Fatalf("history of 2 rows' bytes after 3 rows (-want +got):\n%s", diff)
	}
	if b.ringBytes != 2*large {
		t.Errorf("history holds %d bytes, want %d", b.ringBytes, 2*large)
	}
	afterA := b.epoch + ".1"
	s, reset := b.Subscribe(afterA)
	if reset {
		t.Fatal("a resume after the change just dropped reported a reset")
	}
	if diff := cmp.Diff([]string{"b/failed", "c/failed"}, ids(next(t, s), next(t, s))); diff != "" {
		t.Fatalf("resumed (-want +got):\n%s", diff)
	}
	s.Close()
	if s, reset := b.Subscribe(b.epoch + ".0"); !reset {
		s.Close()
		t.Fatal("a resume from before the dropped change did not report a reset")
	}

	// A row larger than the whole history leaves nothing to resume from.
	b.Publish(bigPod("huge", int(3*large)))
	if len(b.ring) != 0 || b.ringBytes != 0 {
		t.Fatalf("history holds %d changes, %d bytes after a row over history_bytes", len(b.ring), b.ringBytes)
	}
	s, reset = b.Subscribe(b.epoch + ".3")
	defer s.Close()
	if !reset {
		t.Fatal("a resume from before a row the history could not hold did not report a reset")
	}
}

// A resume that would replay more than a subscriber's queue may hold is a
// reset (re-list), not a subscription that overflows at once and resumes
// from the same id again.
func TestBusResumeBeyondQueueBytesResets(t *testing.T) {
	large := costOf(bigPod("a", 16<<10))
	b := newBus(t, func(e *profile.Events) { e.HistoryBytes, e.QueueBytes = 10*large, 2*large })
	for _, id := range []string{"a", "b", "c", "d"} {
		b.Publish(bigPod(id, 16<<10))
	}
	s, reset := b.Subscribe(b.epoch + ".1")
	if !reset || len(s.queue) != 0 {
		t.Errorf("resume owing 3 rows with queue_bytes of 2: reset %v, %d queued; want a reset", reset, len(s.queue))
	}
	s.Close()
	s, reset = b.Subscribe(b.epoch + ".2")
	defer s.Close()
	if reset {
		t.Fatal("resume owing 2 rows with queue_bytes of 2 reported a reset")
	}
	if diff := cmp.Diff([]string{"c/failed", "d/failed"}, ids(next(t, s), next(t, s))); diff != "" {
		t.Fatalf("resumed (-want +got):\n%s", diff)
	}
}

// Every bound must be positive, and the refusal names the key.
func TestNewBusRefusesZeroBounds(t *testing.T) {
	e := profile.Default().Events
	e.QueueBytes = 0
	if _, err := NewBus(e); err == nil || !strings.Contains(err.Error(), "[events] queue_bytes is 0") {
		t.Fatalf("NewBus with queue_bytes 0: %v, want an error naming it", err)
	}
}

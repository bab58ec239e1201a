package events

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/store"
	"crucible.dev/crucible/internal/store/storetest"
)

// newBus is a bus with package profile's default [events] bounds edited by edit.
func newBus(t *testing.T, edit func(*profile.Events)) *Bus {
	t.Helper()
	e := profile.Default().Events
	if edit != nil {
		edit(&e)
	}
	b, err := NewBus(e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func pod(id string, st store.State) store.WorkPod {
	return store.WorkPod{ID: id, Cluster: "wharf", Namespace: "loops", Kind: "turn", State: st, Spec: []byte(`{"image":"x"}`)}
}

// next returns the next change or fails the test after a deadline.
func next(t *testing.T, s *Sub) Change {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	c, err := s.Next(ctx)
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return c
}

func ids(cs ...Change) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Pod.ID+"/"+string(c.Pod.State))
	}
	return out
}

func TestBusDeliversInOrderWithoutSpec(t *testing.T) {
	b := newBus(t, nil)
	s, reset := b.Subscribe("")
	defer s.Close()
	if reset {
		t.Fatal("a fresh subscription reported a reset")
	}
	b.Publish(pod("a", store.StatePending))
	b.Publish(pod("a", store.StateRunning))
	c1, c2 := next(t, s), next(t, s)
	if diff := cmp.Diff([]string{"a/pending", "a/running"}, ids(c1, c2)); diff != "" {
		t.Fatalf("changes (-want +got):\n%s", diff)
	}
	if c1.Pod.Spec != nil {
		t.Fatalf("the spec was published: %q", c1.Pod.Spec)
	}
	if c1.ID == c2.ID {
		t.Fatalf("two changes share the id %q", c1.ID)
	}
}

func TestBusResume(t *testing.T) {
	b := newBus(t, nil)
	b.Publish(pod("a", store.StatePending))
	first := b.ring[0].ID
	b.Publish(pod("a", store.StateRunning))
	b.Publish(pod("b", store.StatePending))

	s, reset := b.Subscribe(first)
	defer s.Close()
	if reset {
		t.Fatal("resume within the history reported a reset")
	}
	if diff := cmp.Diff([]string{"a/running", "b/pending"}, ids(next(t, s), next(t, s))); diff != "" {
		t.Fatalf("resumed changes (-want +got):\n%s", diff)
	}
}

func TestBusResetWhenResumeImpossible(t *testing.T) {
	b := newBus(t, func(e *profile.Events) { e.History = 2 })
	for _, st := range []store.State{store.StatePending, store.StateDispatched, store.StateRunning, store.StateSucceeded} {
		b.Publish(pod("a", st))
	}
	for name, id := range map[string]string{
		"older than the history": b.epoch + ".1",
		"another process":        "zzz.3",
		"from the future":        b.epoch + ".99",
		"malformed":              "not-an-id",
		"hostile":                b.epoch + ".-1",
	} {
		t.Run(name, func(t *testing.T) {
			s, reset := b.Subscribe(id)
			defer s.Close()
			if !reset {
				t.Fatalf("Subscribe(%q) did not report a reset", id)
			}
			if len(s.queue) != 0 {
				t.Fatalf("a reset subscription replayed %d changes", len(s.queue))
			}
		})
	}
	// The oldest change still held resumes without a reset.
	s, reset := b.Subscribe(b.epoch + ".2")
	defer s.Close()
	if reset {
		t.Fatal("resume from the edge of the history reported a reset")
	}
	if diff := cmp.Diff([]string{"a/running", "a/succeeded"}, ids(next(t, s), next(t, s))); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
}

func TestBusOverflowDropsSlowSubscriber(t *testing.T) {
	b := newBus(t, func(e *profile.Events) { e.Queue = 3 })
	slow, _ := b.Subscribe("")
	defer slow.Close()
	for range 4 {
		b.Publish(pod("a", store.StateRunning))
	}
	if _, err := slow.Next(t.Context()); !errors.Is(err, ErrOverflow) {
		t.Fatalf("Next after overflow: %v, want ErrOverflow", err)
	}
	// A fresh subscriber is unaffected.
	fresh, _ := b.Subscribe("")
	defer fresh.Close()
	b.Publish(pod("b", store.StatePending))
	if got := next(t, fresh).Pod.ID; got != "b" {
		t.Fatalf("fresh subscriber got %q", got)
	}
}

func TestSubNextHonoursContextAndClose(t *testing.T) {
	b := newBus(t, nil)
	s, _ := b.Subscribe("")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next with a cancelled context: %v", err)
	}
	s.Close()
	b.Publish(pod("a", store.StatePending))
	if len(b.subs) != 0 || len(s.queue) != 0 {
		t.Fatalf("a closed subscriber still receives: subs=%d queue=%d", len(b.subs), len(s.queue))
	}
}

// The decorator is still a conforming store.
func TestStoreConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return Store{Store: storetest.SQLite(t), Pub: newBus(t, nil)} })
}

func TestStorePublishesVisibleChanges(t *testing.T) {
	b := newBus(t, nil)
	st := Store{Store: storetest.SQLite(t), Pub: b}
	sub, _ := b.Subscribe("")
	defer sub.Close()
	ctx := t.Context()

	if _, err := st.CreateWorkPod(ctx, pod("a", store.StatePending)); err != nil {
		t.Fatal(err)
	}
	created := next(t, sub)
	if created.Pod.ID != "a" || created.Pod.CreatedAt.IsZero() || created.Pod.Spec != nil {
		t.Fatalf("created event: %+v", created.Pod)
	}
	// Invisible change: no event.
	if _, err := st.UpdateWorkPod(ctx, "a", func(*store.WorkPod) error { return nil }); err != nil {
		t.Fatal(err)
	}
	// A failed update: no event.
	boom := errors.New("boom")
	if _, err := st.UpdateWorkPod(ctx, "a", func(p *store.WorkPod) error { p.State = store.StateFailed; return boom }); !errors.Is(err, boom) {
		t.Fatalf("update error: %v", err)
	}
	exit := int32(3)
	if _, err := st.UpdateWorkPod(ctx, "a", func(p *store.WorkPod) error {
		p.State, p.ExitCode = store.StateFailed, &exit
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	got := next(t, sub)
	if got.Pod.State != store.StateFailed || got.Pod.ExitCode == nil || *got.Pod.ExitCode != 3 {
		t.Fatalf("update event: %+v", got.Pod)
	}
	if _, err := st.UpdateWorkPod(ctx, "a", func(p *store.WorkPod) error { p.LogCollected = true; return nil }); err != nil {
		t.Fatal(err)
	}
	if got := next(t, sub); !got.Pod.LogCollected {
		t.Fatalf("log collected event: %+v", got.Pod)
	}
	if n := len(b.ring); n != 3 {
		t.Fatalf("published %d changes, want 3 (create, finish, log collected)", n)
	}
	// A failed create publishes nothing.
	if _, err := st.CreateWorkPod(ctx, pod("a", store.StatePending)); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("duplicate create: %v", err)
	}
	if n := len(b.ring); n != 3 {
		t.Fatalf("a failed create published: %d changes", n)
	}
}

func TestStoreWithoutPublisher(t *testing.T) {
	st := Store{Store: storetest.SQLite(t)}
	if _, err := st.CreateWorkPod(t.Context(), pod("a", store.StatePending)); err != nil {
		t.Fatal(err)
	}
	if _, err := st.UpdateWorkPod(t.Context(), "a", func(p *store.WorkPod) error { p.State = store.StateRunning; return nil }); err != nil {
		t.Fatal(err)
	}
}

// A transition that matched publishes the row it wrote; one that did not
// publishes nothing.
func TestStorePublishesTransitions(t *testing.T) {
	b := newBus(t, nil)
	st := Store{Store: storetest.SQLite(t), Pub: b}
	sub, _ := b.Subscribe("")
	defer sub.Close()
	ctx := t.Context()
	if _, err := st.CreateWorkPod(ctx, pod("a", store.StatePending)); err != nil {
		t.Fatal(err)
	}
	next(t, sub)
	if _, err := st.TransitionWorkPod(ctx, "a", store.Transition{From: []store.State{store.StatePending}, To: store.StateDispatched, PodUID: "uid-a"}); err != nil {
		t.Fatal(err)
	}
	if got := next(t, sub); got.Pod.State != store.StateDispatched || got.Pod.PodUID != "uid-a" {
		t.Fatalf("transition event: %+v", got.Pod)
	}
	if _, err := st.TransitionWorkPod(ctx, "a", store.Transition{From: []store.State{store.StatePending}, To: store.StateRunning}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("transition from a state the row is not in: %v, want ErrConflict", err)
	}
	if n := len(b.ring); n != 2 {
		t.Fatalf("published %d changes, want 2 (create, dispatched)", n)
	}
}

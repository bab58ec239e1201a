package storetest

import (
	"errors"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"crucible.dev/crucible/internal/store"
)

// placed is a row the controller placed on wharf, dispatched as pod "u1"
// and waiting unschedulable.
func placed(t *testing.T, s store.Store, id string) store.WorkPod {
	t.Helper()
	mustCreate(t, s, pod(id, func(p *store.WorkPod) {
		p.Placement = &store.Placement{Decision: "wharf: fits (4 nvidia.com/gpu free)", Eligible: []string{"wharf", "dock"}}
	}))
	if _, err := s.TransitionWorkPod(t.Context(), id, store.Transition{From: []store.State{store.StatePending}, To: store.StateDispatched, PodUID: "u1"}); err != nil {
		t.Fatal(err)
	}
	p, _ := mustObserve(t, s, id, store.Observation{Waiting: waiting("Unschedulable", "0/1 nodes are available")})
	return p
}

func moveToDock(from, uid string) store.Move {
	return store.Move{From: from, PodUID: uid, To: "dock", Namespace: "dock-loops", Spec: []byte(`{"prompt":"on dock"}`),
		Placement: &store.Placement{Decision: "wharf: tried before; dock: fits (16 nvidia.com/gpu free)", Eligible: []string{"wharf", "dock"}, Tried: []string{"wharf"}},
		Reason:    "unschedulable for 30s (class gpu spill_after)"}
}

// testMove: a move makes the row pending on its new cluster with no pod,
// nothing observed of the old one, the new spec and placement, and a
// history entry after the state change it made.
func testMove(t *testing.T, s store.Store) {
	placed(t, s, "mv")
	m := moveToDock("wharf", "u1")
	got, err := s.MoveWorkPod(t.Context(), "mv", m)
	if err != nil {
		t.Fatal(err)
	}
	stored := mustGet(t, s, "mv")
	if diff := cmp.Diff(stored, got); diff != "" {
		t.Errorf("returned row differs from the stored one (-stored +returned):\n%s", diff)
	}
	want := pod("mv", func(p *store.WorkPod) {
		p.Cluster, p.Namespace, p.Spec, p.Placement = "dock", "dock-loops", m.Spec, m.Placement
	})
	if diff := cmp.Diff(want, stored, ignoreStoreTimes); diff != "" {
		t.Errorf("moved row (-want +got):\n%s", diff)
	}
	h := history(t, s, "mv")
	if len(h) < 2 {
		t.Fatalf("history %+v: want the move at its end", h)
	}
	back := h[len(h)-2]
	if back.Event != store.EventState || back.State != store.StatePending || !back.At.Equal(stored.UpdatedAt) {
		t.Errorf("entry before the move = %+v, want the state back to pending at %v", back, stored.UpdatedAt)
	}
	moved := store.HistoryEntry{At: stored.UpdatedAt, Event: store.EventMoved, State: store.StatePending, Reason: m.Reason, Message: "wharf → dock"}
	if diff := cmp.Diff(moved, h[len(h)-1]); diff != "" {
		t.Errorf("move entry (-want +got):\n%s", diff)
	}
	if from, to, ok := h[len(h)-1].Move(); !ok || from != "wharf" || to != "dock" {
		t.Errorf("the entry reads as a move %q → %q (%v), want wharf → dock", from, to, ok)
	}
	if _, _, ok := back.Move(); ok {
		t.Error("a state entry reads as a move")
	}

	// A never-dispatched row (its create refused for quota) moves too,
	// without a state change: the move is its one entry.
	mustCreate(t, s, pod("mv-new", func(p *store.WorkPod) { p.Placement = &store.Placement{Decision: "wharf: fits"} }))
	if _, err := s.MoveWorkPod(t.Context(), "mv-new", moveToDock("wharf", "")); err != nil {
		t.Fatal(err)
	}
	if h := history(t, s, "mv-new"); len(h) != 2 || h[1].Event != store.EventMoved {
		t.Errorf("history of a never-dispatched move: %+v, want created then moved", h)
	}
}

// testMoveRefused: a row that is not where the mover saw it, started, is
// finished, or was pinned by its submitter, is not moved, and nothing
// changes; a move that is not whole is refused before the store is read.
func testMoveRefused(t *testing.T, s store.Store) {
	placed(t, s, "mr")
	mustCreate(t, s, pod("pinned", func(p *store.WorkPod) { p.State, p.PodUID = store.StateDispatched, "u1" }))
	placed(t, s, "running")
	if _, err := s.TransitionWorkPod(t.Context(), "running", store.Transition{To: store.StateRunning}); err != nil {
		t.Fatal(err)
	}
	before := snap(t, s)
	for _, tc := range []struct {
		name, id string
		m        store.Move
		want     error
	}{
		{"another pod now", "mr", moveToDock("wharf", "u2"), store.ErrConflict},
		{"another cluster now", "mr", moveToDock("pier", "u1"), store.ErrConflict},
		{"started", "running", moveToDock("wharf", "u1"), store.ErrConflict},
		{"pinned", "pinned", moveToDock("wharf", "u1"), store.ErrConflict},
		{"no such row", "ghost", moveToDock("wharf", "u1"), store.ErrNotFound},
	} {
		if _, err := s.MoveWorkPod(t.Context(), tc.id, tc.m); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	for name, mod := range map[string]func(*store.Move){
		"to itself":    func(m *store.Move) { m.To = "wharf" },
		"no namespace": func(m *store.Move) { m.Namespace = "" },
		"no spec":      func(m *store.Move) { m.Spec = nil },
		"no placement": func(m *store.Move) { m.Placement = nil },
		"no reason":    func(m *store.Move) { m.Reason = "" },
		"no from":      func(m *store.Move) { m.From = "" },
	} {
		m := moveToDock("wharf", "u1")
		mod(&m)
		if _, err := s.MoveWorkPod(t.Context(), "mr", m); err == nil || errors.Is(err, store.ErrConflict) {
			t.Errorf("move %s: %v, want a refusal of the move itself", name, err)
		}
	}
	if diff := cmp.Diff(before, snap(t, s)); diff != "" {
		t.Errorf("refused moves changed the store (-before +after):\n%s", diff)
	}
}

// testMoveFenced: a fenced move is the leaving cluster's owner's: another
// cluster's fence, or an older epoch of wharf's, is refused.
func testMoveFenced(t *testing.T, s store.Store) {
	placed(t, s, "mf")
	if err := s.ClaimEpoch(t.Context(), "wharf", 5); err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]store.Fence{"dock's fence": {Cluster: "dock", Epoch: 9}, "an older epoch": {Cluster: "wharf", Epoch: 4}} {
		if _, err := s.MoveWorkPod(store.WithFence(t.Context(), f.Cluster, f.Epoch), "mf", moveToDock("wharf", "u1")); !errors.Is(err, store.ErrFenced) {
			t.Errorf("move under %s: %v, want ErrFenced", name, err)
		}
	}
	if _, err := s.MoveWorkPod(store.WithFence(t.Context(), "wharf", 5), "mf", moveToDock("wharf", "u1")); err != nil {
		t.Errorf("move under wharf's own fence: %v", err)
	}
}

// testMoveConcurrent: of two movers that saw the same row, one moves it.
func testMoveConcurrent(t *testing.T, s store.Store) {
	placed(t, s, "mc")
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Go(func() {
			m := moveToDock("wharf", "u1")
			if i == 1 {
				m.To, m.Namespace = "pier", "pier-loops"
			}
			_, errs[i] = s.MoveWorkPod(t.Context(), "mc", m)
		})
	}
	wg.Wait()
	moved := 0
	for _, err := range errs {
		switch {
		case err == nil:
			moved++
		case !errors.Is(err, store.ErrConflict):
			t.Errorf("concurrent move: %v, want nil or ErrConflict", err)
		}
	}
	if moved != 1 {
		t.Errorf("%d of 2 concurrent moves succeeded (%v), want 1", moved, errs)
	}
}

// testListPlacedSince: CreatedSince keeps the rows created at or after it,
// Placed the rows the controller placed; with states they select the
// placements still in flight.
func testListPlacedSince(t *testing.T, s store.Store) {
	placedBy := func(p *store.WorkPod) { p.Placement = &store.Placement{Decision: "wharf: fits"} }
	mustCreate(t, s, pod("old-placed", placedBy), pod("old-pinned"))
	mustCreate(t, s, pod("new-placed", placedBy))
	since := mustGet(t, s, "new-placed").CreatedAt
	mustCreate(t, s, pod("new-pinned"), pod("new-placed-done", placedBy, func(p *store.WorkPod) { p.State = store.StateSucceeded }))
	for _, tc := range []struct {
		name string
		f    store.Filter
		want []string
	}{
		{"since", store.Filter{CreatedSince: since}, []string{"new-placed-done", "new-pinned", "new-placed"}},
		{"placed", store.Filter{Placed: true}, []string{"new-placed-done", "new-placed", "old-placed"}},
		{"placed since, in flight", store.Filter{CreatedSince: since, Placed: true, States: []store.State{store.StatePending, store.StateDispatched}, WithoutSpec: true},
			[]string{"new-placed"}},
	} {
		got, err := s.ListWorkPods(t.Context(), tc.f)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		ids := []string{}
		for _, p := range got {
			ids = append(ids, p.ID)
		}
		if diff := cmp.Diff(tc.want, ids); diff != "" {
			t.Errorf("%s: ids (-want +got):\n%s", tc.name, diff)
		}
	}
}

package storetest

import (
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"crucible.dev/crucible/internal/store"
)

// testTransition pins TransitionWorkPod: it sets exactly the fields named,
// returns the row as a later read sees it, and bumps UpdatedAt.
func testTransition(t *testing.T, s store.Store) {
	mustCreate(t, s, pod("tr", func(p *store.WorkPod) { p.Reason = "kept"; p.Spec = []byte(`{"a":1}`) }))
	before := mustGet(t, s, "tr")

	got, err := s.TransitionWorkPod(t.Context(), "tr", store.Transition{
		From: []store.State{store.StatePending}, To: store.StateDispatched, PodUID: "uid-1"})
	if err != nil {
		t.Fatalf("transition: %v", err)
	}
	want := before
	want.State, want.PodUID, want.UpdatedAt, want.Spec = store.StateDispatched, "uid-1", got.UpdatedAt, nil
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("returned (-want +got), Spec left out:\n%s", diff)
	}
	if !got.UpdatedAt.After(before.UpdatedAt) {
		t.Errorf("UpdatedAt %v not after %v", got.UpdatedAt, before.UpdatedAt)
	}
	if diff := cmp.Diff(got, withoutSpec(mustGet(t, s, "tr"))); diff != "" {
		t.Errorf("get after transition (-returned +get):\n%s", diff)
	}
	if got := mustGet(t, s, "tr"); string(got.Spec) != `{"a":1}` {
		t.Errorf("spec after transition %q, want it kept", got.Spec)
	}

	// Finishing sets the outcome and FinishedAt from the store's clock.
	got, err = s.TransitionWorkPod(t.Context(), "tr", store.Transition{
		From: []store.State{store.StateDispatched, store.StateRunning}, To: store.StateFailed,
		Reason: "Error", ExitCode: ptr(int32(3)), Finish: true, LogCollected: true})
	if err != nil {
		t.Fatalf("finish: %v", err)
	}
	switch {
	case got.State != store.StateFailed || got.Reason != "Error" || got.ExitCode == nil || *got.ExitCode != 3 || !got.LogCollected:
		t.Errorf("finished row: %+v", got)
	case got.FinishedAt == nil || !got.FinishedAt.Equal(got.UpdatedAt) || got.FinishedAt.Location().String() != "UTC":
		t.Errorf("FinishedAt %v, want the UpdatedAt %v in UTC", got.FinishedAt, got.UpdatedAt)
	case got.PodUID != "uid-1" || got.Spec != nil:
		t.Errorf("fields not named changed, or Spec returned: %+v", got)
	}
	if diff := cmp.Diff(got, withoutSpec(mustGet(t, s, "tr"))); diff != "" {
		t.Errorf("get after finish (-returned +get):\n%s", diff)
	}

	// No From: any state.
	if got, err = s.TransitionWorkPod(t.Context(), "tr", store.Transition{Reason: "again"}); err != nil || got.Reason != "again" || got.State != store.StateFailed {
		t.Errorf("transition from any state: %+v, %v", got, err)
	}
	testTransitionApply(t, s)
}

// testTransitionApply: Transition.Apply, the contract for stores kept in
// memory, does to a row what the store does.
func testTransitionApply(t *testing.T, s store.Store) {
	mustCreate(t, s, pod("apply", func(*store.WorkPod) {}))
	for i, tr := range []store.Transition{
		{From: []store.State{store.StatePending}, To: store.StateDispatched, PodUID: "uid-a"},
		{From: store.LiveStates, To: store.StateRunning},
		{From: store.LiveStates, To: store.StateCancelled, Reason: "cancelled", Finish: true},
		{LogCollected: true, ExitCode: ptr(int32(0))},
	} {
		want := withoutSpec(mustGet(t, s, "apply"))
		got, err := s.TransitionWorkPod(t.Context(), "apply", tr)
		if err != nil {
			t.Fatalf("transition %d: %v", i, err)
		}
		if err := tr.Apply(&want, got.UpdatedAt); err != nil {
			t.Fatalf("apply %d: %v", i, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("transition %d: Apply (-) and the store (+) differ:\n%s", i, diff)
		}
	}
	row := mustGet(t, s, "apply")
	if err := (store.Transition{From: store.LiveStates, To: store.StateLost}).Apply(&row, row.UpdatedAt); !errors.Is(err, store.ErrConflict) {
		t.Errorf("Apply to a cancelled row from the live states: %v, want ErrConflict", err)
	}
	if _, err := s.TransitionWorkPod(t.Context(), "apply", store.Transition{From: store.LiveStates, To: store.StateLost}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("the store, the same: %v, want ErrConflict", err)
	}
}

// testTransitionRefused: a row in another state, no row, and undeclared
// states are errors that leave the row unchanged.
func testTransitionRefused(t *testing.T, s store.Store) {
	mustCreate(t, s, pod("ref", func(p *store.WorkPod) { p.State = store.StateRunning }))
	before := mustGet(t, s, "ref")
	cases := map[string]struct {
		id   string
		tr   store.Transition
		want error
	}{
		"state moved on": {"ref", store.Transition{From: []store.State{store.StatePending}, To: store.StateDispatched}, store.ErrConflict},
		"no such row":    {"ghost", store.Transition{To: store.StateLost}, store.ErrNotFound},
		"unknown to":     {"ref", store.Transition{To: "exploded"}, nil},
		"unknown from":   {"ref", store.Transition{From: []store.State{"nope"}, To: store.StateLost}, nil},
		"from too long":  {"ref", store.Transition{From: slices.Repeat([]store.State{store.StateRunning}, 8), To: store.StateLost}, nil},
		"hostile id":     {"ref' OR '1'='1", store.Transition{To: store.StateLost}, store.ErrNotFound},
	}
	for name, tc := range cases {
		_, err := s.TransitionWorkPod(t.Context(), tc.id, tc.tr)
		switch {
		case err == nil:
			t.Errorf("%s: got nil error", name)
		case tc.want != nil && !errors.Is(err, tc.want):
			t.Errorf("%s: got %v, want %v", name, err, tc.want)
		case tc.want == nil && (errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound)):
			t.Errorf("%s: got %v, want a validation error", name, err)
		}
	}
	if diff := cmp.Diff(before, mustGet(t, s, "ref")); diff != "" {
		t.Errorf("refused transitions changed the row (-before +after):\n%s", diff)
	}
}

// testTransitionConcurrent: of 16 racing pending → dispatched transitions
// exactly one wins; the rest see ErrConflict.
func testTransitionConcurrent(t *testing.T, s store.Store) {
	const workers = 16
	mustCreate(t, s, pod("race"))
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		won       []string
		conflicts int
	)
	for w := range workers {
		wg.Go(func() {
			uid := string(rune('a' + w))
			_, err := s.TransitionWorkPod(t.Context(), "race", store.Transition{From: []store.State{store.StatePending}, To: store.StateDispatched, PodUID: uid})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won = append(won, uid)
			case errors.Is(err, store.ErrConflict):
				conflicts++
			default:
				t.Errorf("transition: %v", err)
			}
		})
	}
	wg.Wait()
	if len(won) != 1 || conflicts != workers-1 {
		t.Fatalf("%d won (%v), %d conflicts; want exactly one winner", len(won), won, conflicts)
	}
	if got := mustGet(t, s, "race"); got.PodUID != won[0] || got.State != store.StateDispatched {
		t.Errorf("row %+v, want the winner's uid %s", got, won[0])
	}
}

func withoutSpec(p store.WorkPod) store.WorkPod {
	p.Spec = nil
	return p
}

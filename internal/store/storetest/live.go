package storetest

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"crucible.dev/crucible/internal/store"
)

// testCountLive: live pods are counted per cluster and state; terminal
// ones and clusters without live pods are not; a transition moves a count.
func testCountLive(t *testing.T, s store.Store) {
	got, err := s.CountLive(t.Context())
	if err != nil || len(got) != 0 {
		t.Fatalf("count of an empty store = %v, %v; want none", got, err)
	}
	mustCreate(t, s,
		pod("a", func(p *store.WorkPod) { p.Cluster, p.State = "wharf", store.StateRunning }),
		pod("b", func(p *store.WorkPod) { p.Cluster, p.State = "dock", store.StatePending }),
		pod("c", func(p *store.WorkPod) { p.Cluster, p.State = "wharf", store.StateSucceeded }),
		pod("d", func(p *store.WorkPod) { p.Cluster, p.State = "wharf", store.StateRunning }),
		pod("e", func(p *store.WorkPod) { p.Cluster, p.State = "pier", store.StateLost }),
		pod("f", func(p *store.WorkPod) { p.Cluster, p.State = "wharf", store.StateDispatched }),
		pod("g", func(p *store.WorkPod) { p.Cluster, p.State = "wharf", store.StatePending }),
	)
	want := map[string]store.LiveCounts{
		"wharf": {Pending: 1, Dispatched: 1, Running: 2},
		"dock":  {Pending: 1},
	}
	if got, err = s.CountLive(t.Context()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("live counts (-want +got):\n%s", diff)
	}
	if _, err := s.TransitionWorkPod(t.Context(), "b", store.Transition{From: []store.State{store.StatePending}, To: store.StateCancelled, Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	delete(want, "dock")
	if got, err = s.CountLive(t.Context()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("live counts after dock's pod ended (-want +got):\n%s", diff)
	}
}

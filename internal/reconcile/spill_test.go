package reconcile

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"crucible.dev/crucible/internal/store"
	"crucible.dev/crucible/internal/workpod"
)

// spillSpec is the stored spec of a work pod of class gpu that spills
// after spillAfter seconds at most maxSpills times (max_pending 600).
func spillSpec(t *testing.T, spillAfter int64, maxSpills int) []byte {
	t.Helper()
	spec, err := json.Marshal(workpod.WorkPod{ID: "p1", Kind: workpod.KindTurn, Image: "busybox",
		Shape: workpod.Shape{Class: "gpu", DeadlineSeconds: 3600, MaxPendingSeconds: 600, SpillAfterSeconds: spillAfter, MaxSpills: maxSpills, RunAsUser: 65532}})
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// TestDecideSpill: a placed row whose pod was created, never started and
// waits Unschedulable moves once its class's spill_after has passed, fewer
// than max_spills times; a pinned row, a started one, one not created yet,
// another wait, another pod of the name, or a class without spill_after
// never does.
func TestDecideSpill(t *testing.T) {
	since := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	spec := spillSpec(t, 30, 2)
	placed := &store.Placement{Decision: "wharf: fits (4 nvidia.com/gpu free)", Eligible: []string{"wharf", "dock"}}
	row := func(mods ...func(*store.WorkPod)) *store.WorkPod {
		r := testRow(store.StateDispatched, "u1")
		r.Spec, r.Placement = spec, placed
		r.Waiting = &store.Waiting{Reason: "Unschedulable", Message: unschedulable, Since: since}
		for _, m := range mods {
			m(r)
		}
		return r
	}
	gated := inCache(podWith(corev1.PodPending, "", scheduledFalse("Unschedulable", unschedulable)))
	moves := waitLimit{Passed: true, Reason: "unschedulable on wharf for 30s (class gpu spill_after): " + unschedulable}
	late := since.Add(time.Minute)
	tests := []struct {
		name    string
		cluster string
		row     *store.WorkPod
		pod     *cachedPod
		now     time.Time
		want    waitLimit
	}{
		{"within spill_after", "wharf", row(), gated, since.Add(10 * time.Second), waitLimit{Recheck: 20 * time.Second}},
		{"at spill_after", "wharf", row(), gated, since.Add(30 * time.Second), moves},
		{"its pod gone from the cache", "wharf", row(), nil, late, moves},
		{"moved once of two", "wharf", row(func(r *store.WorkPod) {
			r.Placement = &store.Placement{Decision: "x", Eligible: []string{"pier", "wharf", "dock"}, Tried: []string{"pier"}}
		}), gated, late, moves},
		{"moved max_spills times", "wharf", row(func(r *store.WorkPod) {
			r.Placement = &store.Placement{Decision: "x", Eligible: []string{"pier", "quay", "wharf", "dock"}, Tried: []string{"pier", "quay"}}
		}), gated, late, waitLimit{}},
		{"pinned by its submitter", "wharf", row(func(r *store.WorkPod) { r.Placement = nil }), gated, late, waitLimit{}},
		{"started", "wharf", row(func(r *store.WorkPod) { r.State = store.StateRunning }), gated, late, waitLimit{}},
		{"not created yet", "wharf", row(func(r *store.WorkPod) { r.State, r.PodUID = store.StatePending, "" }), gated, late, waitLimit{}},
		{"another wait", "wharf", row(func(r *store.WorkPod) { r.Waiting.Reason = "ImagePullBackOff" }), gated, late, waitLimit{}},
		{"no wait", "wharf", row(func(r *store.WorkPod) { r.Waiting = nil }), gated, late, waitLimit{}},
		{"a class without spill_after", "wharf", row(func(r *store.WorkPod) { r.Spec = spillSpec(t, 0, 0) }), gated, late, waitLimit{}},
		{"finished", "wharf", row(func(r *store.WorkPod) { r.State = store.StateCancelled }), gated, late, waitLimit{}},
		{"another pod of the name", "wharf", row(func(r *store.WorkPod) { r.PodUID = "u2" }), gated, late, waitLimit{}},
		{"a row of another cluster", "dock", row(), gated, late, waitLimit{}},
		{"no row", "wharf", nil, gated, late, waitLimit{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := decideSpill(syncFacts{Cluster: tt.cluster, Row: tt.row, Pod: tt.pod}, tt.now)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("decideSpill (-want +got):\n%s", diff)
			}
		})
	}
}

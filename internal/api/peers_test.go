package api

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"crucible.dev/crucible/internal/capacity"
	"crucible.dev/crucible/internal/store"
	"crucible.dev/crucible/internal/workpod"
)

// CountPlacements counts another replica's placements in flight against
// the views, once each, until ReserveTTL after the row's creation; this
// replica's own placements (reserved when placed), pinned rows, rows whose
// pod was seen scheduled and finished rows are not counted again.
func TestCountPlacementsOfOtherReplicas(t *testing.T) {
	f, fc := placementFixture(t)
	w := f.do(t, req{method: "POST", path: "/api/pods", token: "tok-admin", body: `{"cluster":"auto","image":"busybox"}`})
	if w.Code != http.StatusCreated {
		t.Fatalf("submit: %d %s", w.Code, w.Body)
	}
	spec, err := json.Marshal(workpod.WorkPod{ID: "turn-peer", Kind: workpod.KindTurn, Image: "busybox",
		Shape: workpod.Shape{Class: "standard", DeadlineSeconds: 3600, RunAsUser: 65532}})
	if err != nil {
		t.Fatal(err)
	}
	placedElsewhere := func(id string, mods ...func(*store.WorkPod)) {
		row := store.WorkPod{ID: id, Cluster: "dock", Namespace: "loops", Kind: workpod.KindTurn, State: store.StatePending, Spec: spec,
			Placement: &store.Placement{Decision: "dock: fits", Eligible: []string{"wharf", "dock"}}}
		for _, m := range mods {
			m(&row)
		}
		if _, err := f.st.CreateWorkPod(t.Context(), row); err != nil {
			t.Fatal(err)
		}
	}
	placedElsewhere("turn-peer")
	placedElsewhere("turn-pinned", func(r *store.WorkPod) { r.Placement = nil })
	placedElsewhere("turn-done", func(r *store.WorkPod) { r.State = store.StateSucceeded })
	placedElsewhere("turn-bound", func(r *store.WorkPod) { r.State, r.PodUID = store.StateDispatched, "u1" })
	if _, _, err := f.st.ObservePod(t.Context(), "turn-bound", store.Observation{Node: "gpu-0", Moments: []store.Event{store.EventScheduled}}); err != nil {
		t.Fatal(err)
	}

	for range 2 {
		if err := f.srv.CountPlacements(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	row, err := f.st.GetWorkPod(t.Context(), "turn-peer")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"dock loops/turn-peer until " + row.CreatedAt.Add(capacity.ReserveTTL).UTC().Format(time.RFC3339Nano)}
	if diff := cmp.Diff(want, fc.until); diff != "" {
		t.Errorf("counted (-want +got):\n%s", diff)
	}
}

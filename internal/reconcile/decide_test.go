package reconcile

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"crucible.dev/crucible/internal/store"
	"crucible.dev/crucible/internal/workpod"
)

// testRow is a row of pod "p1" on wharf in state s, attached to uid (or to
// no pod yet when uid is "").
func testRow(s store.State, uid string) *store.WorkPod {
	return &store.WorkPod{ID: "p1", Cluster: "wharf", Namespace: "loops", Kind: "turn", State: s, PodUID: uid}
}

// testPod is pod "p1" with uid in phase, labelled as instance hub-1's.
func testPod(uid string, phase corev1.PodPhase) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p1", Namespace: "loops", UID: types.UID(uid),
			Labels: map[string]string{workpod.LabelManagedBy: workpod.ManagedByValue, workpod.LabelInstance: "hub-1", workpod.LabelWorkPod: "p1"}},
		Status: corev1.PodStatus{Phase: phase},
	}
}

func TestDecideSync(t *testing.T) {
	collected := func(r *store.WorkPod) *store.WorkPod { r.LogCollected = true; return r }
	onDock := func(r *store.WorkPod) *store.WorkPod { r.Cluster = "dock"; return r }
	tests := []struct {
		name string
		row  *store.WorkPod
		pod  *corev1.Pod
		want syncAction
	}{
		{"no row: an orphan, left to the sweep", nil, testPod("u1", corev1.PodRunning), syncAction{}},
		{"row of another cluster", onDock(testRow(store.StateRunning, "u1")), testPod("u1", corev1.PodRunning), syncAction{}},
		{"row of another cluster, pod gone", onDock(testRow(store.StateRunning, "u1")), nil, syncAction{}},
		{"attached live pod deleted", testRow(store.StateRunning, "u1"), nil,
			syncAction{Op: syncLose, Reason: "pod deleted on wharf before it finished"}},
		{"attached dispatched pod deleted", testRow(store.StateDispatched, "u1"), nil,
			syncAction{Op: syncLose, Reason: "pod deleted on wharf before it finished"}},
		{"pending row, pod not created yet", testRow(store.StatePending, ""), nil, syncAction{}},
		{"finished row, pod swept", collected(testRow(store.StateSucceeded, "u1")), nil, syncAction{}},
		{"cancelled row, pod gone", testRow(store.StateCancelled, "u1"), nil, syncAction{}},
		{"older pod of a re-dispatched row", testRow(store.StateRunning, "u2"), testPod("u1", corev1.PodRunning), syncAction{}},
		{"foreign pod finishing under the row's name", testRow(store.StateRunning, "u2"), testPod("u1", corev1.PodFailed), syncAction{}},
		{"pending pod of a pending row", testRow(store.StatePending, ""), testPod("u1", corev1.PodPending),
			syncAction{Op: syncAdvance, State: store.StateDispatched}},
		{"pod of unknown phase", testRow(store.StatePending, ""), testPod("u1", corev1.PodUnknown),
			syncAction{Op: syncAdvance, State: store.StateDispatched}},
		{"running pod of a dispatched row", testRow(store.StateDispatched, "u1"), testPod("u1", corev1.PodRunning),
			syncAction{Op: syncAdvance, State: store.StateRunning}},
		{"running pod, row not attached yet", testRow(store.StatePending, ""), testPod("u1", corev1.PodRunning),
			syncAction{Op: syncAdvance, State: store.StateRunning}},
		{"running pod of a running row: nothing to write", testRow(store.StateRunning, "u1"), testPod("u1", corev1.PodRunning), syncAction{}},
		{"pending pod of a dispatched row: nothing to write", testRow(store.StateDispatched, "u1"), testPod("u1", corev1.PodPending), syncAction{}},
		{"pending pod of a running row: never backwards", testRow(store.StateRunning, "u1"), testPod("u1", corev1.PodPending), syncAction{}},
		{"running pod of a dispatched row without uid", testRow(store.StateDispatched, ""), testPod("u1", corev1.PodRunning),
			syncAction{Op: syncAdvance, State: store.StateRunning}},
		{"running pod of a cancelled row", testRow(store.StateCancelled, "u1"), testPod("u1", corev1.PodRunning), syncAction{}},
		{"succeeded pod of a running row", testRow(store.StateRunning, "u1"), testPod("u1", corev1.PodSucceeded), syncAction{Op: syncFinish}},
		{"failed pod of a running row", testRow(store.StateRunning, "u1"), testPod("u1", corev1.PodFailed), syncAction{Op: syncFinish}},
		{"finished pod, row recorded but log not collected", testRow(store.StateFailed, "u1"), testPod("u1", corev1.PodFailed), syncAction{Op: syncFinish}},
		{"finished pod of a lost row: its log is still collected", testRow(store.StateLost, "u1"), testPod("u1", corev1.PodSucceeded), syncAction{Op: syncFinish}},
		{"finished pod, outcome and log recorded", collected(testRow(store.StateSucceeded, "u1")), testPod("u1", corev1.PodSucceeded), syncAction{}},
		{"finished pod of a cancelled row", testRow(store.StateCancelled, "u1"), testPod("u1", corev1.PodFailed), syncAction{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := decideSync(syncFacts{Cluster: "wharf", Row: tt.row, Pod: inCache(tt.pod)})
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("decideSync (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAdvance(t *testing.T) {
	tests := []struct {
		name    string
		row     *store.WorkPod
		to      store.State
		want    *store.WorkPod
		changed bool
	}{
		{"pending to dispatched, attaching the pod", testRow(store.StatePending, ""), store.StateDispatched, testRow(store.StateDispatched, "u1"), true},
		{"pending straight to running", testRow(store.StatePending, ""), store.StateRunning, testRow(store.StateRunning, "u1"), true},
		{"dispatched to running", testRow(store.StateDispatched, "u0"), store.StateRunning, testRow(store.StateRunning, "u1"), true},
		{"running never back to dispatched", testRow(store.StateRunning, "u0"), store.StateDispatched, testRow(store.StateRunning, "u0"), false},
		{"same state, already attached", testRow(store.StateDispatched, "u0"), store.StateDispatched, testRow(store.StateDispatched, "u0"), false},
		{"running row not attached yet takes the uid", testRow(store.StateRunning, ""), store.StateDispatched, testRow(store.StateRunning, "u1"), true},
		{"finished row is left", testRow(store.StateSucceeded, "u0"), store.StateRunning, testRow(store.StateSucceeded, "u0"), false},
		{"cancelled row is left", testRow(store.StateCancelled, ""), store.StateRunning, testRow(store.StateCancelled, ""), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			row := *tt.row
			if got := advance(&row, "u1", tt.to); got != tt.changed {
				t.Errorf("advance = %v, want %v", got, tt.changed)
			}
			if diff := cmp.Diff(*tt.want, row); diff != "" {
				t.Errorf("row (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRecordOutcomeAndLose(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	exit := int32(3)
	tests := []struct {
		name string
		row  *store.WorkPod
		want *store.WorkPod
	}{
		{"running row takes the outcome", testRow(store.StateRunning, "u1"),
			&store.WorkPod{ID: "p1", Cluster: "wharf", Namespace: "loops", Kind: "turn", State: store.StateFailed, PodUID: "u1",
				LogCollected: true, ExitCode: &exit, Reason: "Error", FinishedAt: &now}},
		{"unattached row takes the pod's uid too", testRow(store.StateDispatched, ""),
			&store.WorkPod{ID: "p1", Cluster: "wharf", Namespace: "loops", Kind: "turn", State: store.StateFailed, PodUID: "u1",
				LogCollected: true, ExitCode: &exit, Reason: "Error", FinishedAt: &now}},
		{"cancelled meanwhile keeps its verdict, log collected", testRow(store.StateCancelled, "u1"),
			&store.WorkPod{ID: "p1", Cluster: "wharf", Namespace: "loops", Kind: "turn", State: store.StateCancelled, PodUID: "u1", LogCollected: true}},
		{"lost meanwhile keeps its verdict, log collected", testRow(store.StateLost, "u1"),
			&store.WorkPod{ID: "p1", Cluster: "wharf", Namespace: "loops", Kind: "turn", State: store.StateLost, PodUID: "u1", LogCollected: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			row := *tt.row
			recordOutcome(&row, "u1", store.StateFailed, &exit, "Error", now)
			if diff := cmp.Diff(*tt.want, row); diff != "" {
				t.Errorf("recordOutcome (-want +got):\n%s", diff)
			}
		})
	}

	for _, s := range []store.State{store.StatePending, store.StateDispatched, store.StateRunning} {
		row := testRow(s, "u1")
		if err := lose("gone").Apply(row, now); err != nil {
			t.Errorf("lose(%s): %v", s, err)
		}
		want := &store.WorkPod{ID: "p1", Cluster: "wharf", Namespace: "loops", Kind: "turn", State: store.StateLost, PodUID: "u1", Reason: "gone", FinishedAt: &now, UpdatedAt: now}
		if diff := cmp.Diff(want, row); diff != "" {
			t.Errorf("lose(%s) (-want +got):\n%s", s, diff)
		}
	}
	for _, s := range []store.State{store.StateSucceeded, store.StateFailed, store.StateCancelled, store.StateLost} {
		row := testRow(s, "u1")
		if err := lose("gone").Apply(row, now); !errors.Is(err, store.ErrConflict) {
			t.Errorf("lose(%s): %v, want ErrConflict", s, err)
		}
		if diff := cmp.Diff(testRow(s, "u1"), row); diff != "" {
			t.Errorf("lose(%s) changed a finished row (-want +got):\n%s", s, diff)
		}
	}
}

func TestDecideSweep(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	const grace = time.Minute
	old, young, edge := now.Add(-2*grace), now.Add(-grace/2), now.Add(-grace)
	pod := func(uid string, created time.Time) *corev1.Pod {
		p := testPod(uid, corev1.PodRunning)
		p.CreationTimestamp = metav1.NewTime(created)
		return p
	}
	relabel := func(p *corev1.Pod, l map[string]string) *corev1.Pod { p.Labels = l; return p }
	deleting := func(p *corev1.Pod) *corev1.Pod { ts := metav1.NewTime(now); p.DeletionTimestamp = &ts; return p }
	with := func(r *store.WorkPod, f func(*store.WorkPod)) *store.WorkPod { f(r); return r }
	collected := func(r *store.WorkPod) { r.LogCollected = true }
	tests := []struct {
		name       string
		pod        *corev1.Pod
		row        *store.WorkPod
		rowUnknown bool
		want       sweepVerdict
	}{
		{"another instance's pod", relabel(pod("u1", old), map[string]string{workpod.LabelManagedBy: workpod.ManagedByValue, workpod.LabelInstance: "hub-2"}), nil, false, sweepKeep},
		{"not managed by crucible", relabel(pod("u1", old), map[string]string{workpod.LabelInstance: "hub-1"}), nil, false, sweepKeep},
		{"unlabelled pod", relabel(pod("u1", old), nil), nil, false, sweepKeep},
		{"being deleted", deleting(pod("u1", old)), nil, false, sweepKeep},
		{"the store could not answer", pod("u1", old), nil, true, sweepKeep},
		{"no row, past the grace", pod("u1", old), nil, false, sweepOrphaned},
		{"no row, within the grace", pod("u1", young), nil, false, sweepKeep},
		{"no row, exactly at the grace", pod("u1", edge), nil, false, sweepKeep},
		{"row of another cluster, past the grace", pod("u1", old), with(testRow(store.StateRunning, "u1"), func(r *store.WorkPod) { r.Cluster = "dock" }), false, sweepOrphaned},
		{"row of another cluster, within the grace", pod("u1", young), with(testRow(store.StateRunning, "u1"), func(r *store.WorkPod) { r.Cluster = "dock" }), false, sweepKeep},
		{"older pod of a re-dispatched row", pod("u1", old), testRow(store.StateRunning, "u2"), false, sweepOrphaned},
		{"older pod of a re-dispatched collected row, within the grace", pod("u1", young), with(testRow(store.StateSucceeded, "u2"), collected), false, sweepKeep},
		{"awaited, attached", pod("u1", old), testRow(store.StateRunning, "u1"), false, sweepKeep},
		{"awaited, not attached yet", pod("u1", old), testRow(store.StatePending, ""), false, sweepKeep},
		{"finished and collected, however young", pod("u1", young), with(testRow(store.StateSucceeded, "u1"), collected), false, sweepCollected},
		{"failed and collected", pod("u1", old), with(testRow(store.StateFailed, "u1"), collected), false, sweepCollected},
		{"lost, then its log collected", pod("u1", young), with(testRow(store.StateLost, "u1"), collected), false, sweepCollected},
		{"finished, log not collected yet", pod("u1", old), testRow(store.StateFailed, "u1"), false, sweepKeep},
		{"cancelled, past the grace", pod("u1", old), testRow(store.StateCancelled, "u1"), false, sweepOrphaned},
		{"cancelled, within the grace", pod("u1", young), testRow(store.StateCancelled, "u1"), false, sweepKeep},
		{"lost, past the grace", pod("u1", old), testRow(store.StateLost, "u1"), false, sweepOrphaned},
		{"lost, within the grace", pod("u1", young), testRow(store.StateLost, "u1"), false, sweepKeep},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := sweepFacts{Cluster: "wharf", Pod: &tt.pod.ObjectMeta, Row: tt.row, RowUnknown: tt.rowUnknown}
			if got := decideSweep(f, "hub-1", grace, now); got != tt.want {
				t.Errorf("decideSweep = %q, want %q", got, tt.want)
			}
		})
	}
}

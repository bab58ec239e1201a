package reconcile

import (
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"crucible.dev/crucible/internal/store"
	"crucible.dev/crucible/internal/store/storetest"
	"crucible.dev/crucible/internal/workpod"
)

// The sweep's decision for each kind of pod it may meet, against a real
// (SQLite) store.
func TestSweepVerdict(t *testing.T) {
	st := storetest.SQLite(t)
	r := &Reconciler{Store: st, Instance: "hub-1", OrphanGrace: time.Minute, Log: slog.New(slog.DiscardHandler)}
	rows := []store.WorkPod{
		{ID: "live", Cluster: "wharf", State: store.StateRunning, PodUID: "u-live"},
		{ID: "collected", Cluster: "wharf", State: store.StateSucceeded, PodUID: "u-collected", LogCollected: true},
		{ID: "uncollected", Cluster: "wharf", State: store.StateFailed, PodUID: "u-uncollected"},
		{ID: "cancelled", Cluster: "wharf", State: store.StateCancelled, PodUID: "u-cancelled"},
		{ID: "elsewhere", Cluster: "dock", State: store.StateRunning, PodUID: "u-elsewhere"},
		{ID: "replaced", Cluster: "wharf", State: store.StateRunning, PodUID: "u-new"},
	}
	for _, row := range rows {
		row.Namespace, row.Kind = "loops", "turn"
		if _, err := st.CreateWorkPod(t.Context(), row); err != nil {
			t.Fatal(err)
		}
	}
	old, young := time.Now().Add(-2*time.Minute), time.Now()
	pod := func(name, uid string, created time.Time, labels map[string]string) *corev1.Pod {
		if labels == nil {
			labels = map[string]string{workpod.LabelManagedBy: workpod.ManagedByValue, workpod.LabelInstance: "hub-1", workpod.LabelWorkPod: name}
		}
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(uid), Labels: labels, CreationTimestamp: metav1.NewTime(created)}}
	}
	cases := []struct {
		name string
		pod  *corev1.Pod
		want sweepVerdict
	}{
		{"awaited", pod("live", "u-live", old, nil), ""},
		{"finished and collected", pod("collected", "u-collected", young, nil), "collected"},
		{"finished, log not collected yet", pod("uncollected", "u-uncollected", old, nil), ""},
		{"cancelled, past the grace", pod("cancelled", "u-cancelled", old, nil), "orphaned"},
		{"cancelled, within the grace", pod("cancelled", "u-cancelled", young, nil), ""},
		{"no row, past the grace", pod("stray", "u-stray", old, nil), "orphaned"},
		{"no row, within the grace", pod("stray", "u-stray", young, nil), ""},
		{"row of another cluster", pod("elsewhere", "u-elsewhere", old, nil), "orphaned"},
		{"older pod of a re-dispatched row", pod("replaced", "u-old", old, nil), "orphaned"},
		{"another instance's pod", pod("stray", "u", old, map[string]string{workpod.LabelManagedBy: workpod.ManagedByValue, workpod.LabelInstance: "hub-2"}), ""},
		{"unlabelled pod", pod("stray", "u", old, map[string]string{}), ""},
	}
	deleting := pod("stray", "u-stray", old, nil)
	now := metav1.Now()
	deleting.DeletionTimestamp = &now
	cases = append(cases, struct {
		name string
		pod  *corev1.Pod
		want sweepVerdict
	}{"pod already being deleted", deleting, ""})
	// Each pod alone, then all of them as one listed page (one read of the
	// store): the same verdicts.
	var page []metav1.PartialObjectMetadata
	for _, tc := range cases {
		listed := metav1.PartialObjectMetadata{ObjectMeta: tc.pod.ObjectMeta}
		if got := r.verdicts(t.Context(), "wharf", []metav1.PartialObjectMetadata{listed}); got[0] != tc.want {
			t.Errorf("%s: verdict = %q, want %q", tc.name, got[0], tc.want)
		}
		page = append(page, listed)
	}
	for i, got := range r.verdicts(t.Context(), "wharf", page) {
		if got != cases[i].want {
			t.Errorf("%s, in a page: verdict = %q, want %q", cases[i].name, got, cases[i].want)
		}
	}
	// A store that cannot answer keeps every pod of the page.
	st.Close()
	for i, got := range r.verdicts(t.Context(), "wharf", page) {
		if got != sweepKeep {
			t.Errorf("%s, store closed: verdict = %q, want none", cases[i].name, got)
		}
	}
}

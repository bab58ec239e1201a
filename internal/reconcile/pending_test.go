package reconcile

import (
	"context"
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"crucible.dev/crucible/internal/store"
	"crucible.dev/crucible/internal/store/storetest"
)

// With several replicas a new leader's startup reconcile may meet rows whose
// submit is still running on another replica: their pods are not in its
// first list yet. Such rows are judged after PendingGrace, not marked lost
// at once; then a pod that came is resumed and a row still without one is
// lost. With PendingGrace 0 (one replica) a missing pod is lost at once.
func TestStartupReconcileWaitsForInFlightSubmits(t *testing.T) {
	st := storetest.SQLite(t)
	// "never" was dispatched by the other replica (it has a pod uid), its
	// pod since gone; rows never dispatched are TestStartupNeverDispatchedRows'.
	for _, row := range []store.WorkPod{{ID: "arrives", State: store.StatePending}, {ID: "never", State: store.StateDispatched, PodUID: "u-never"}, {ID: "present", State: store.StatePending}} {
		row.Cluster, row.Namespace, row.Kind = "wharf", "loops", "turn"
		if _, err := st.CreateWorkPod(t.Context(), row); err != nil {
			t.Fatal(err)
		}
	}
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	addPod := func(name string) {
		if err := indexer.Add(inCache(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "loops"}})); err != nil {
			t.Fatal(err)
		}
	}
	addPod("present")
	newReconciler := func(grace time.Duration) *Reconciler {
		return &Reconciler{
			Store: st, PendingGrace: grace, Log: slog.New(slog.DiscardHandler),
			queues: map[string]workqueue.TypedRateLimitingInterface[key]{"wharf": workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[key]())},
			caches: map[string]podCache{"wharf": {indexer: indexer, namespace: "loops"}},
		}
	}
	state := func(id string) store.State {
		row, err := st.GetWorkPod(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		return row.State
	}

	// The grace has not passed when the leader stops: nothing is judged.
	r := newReconciler(time.Hour)
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		deadline := time.Now().Add(10 * time.Second)
		for r.queues["wharf"].Len() == 0 && time.Now().Before(deadline) { // "present" is queued before the wait begins
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	r.startupReconcile(ctx, "wharf", time.Now().Add(time.Second)) // every row predates these loops
	if got := []store.State{state("arrives"), state("never")}; got[0] != store.StatePending || got[1] != store.StateDispatched {
		t.Fatalf("rows of in-flight submits judged before the grace: %v", got)
	}
	if item, _ := r.queues["wharf"].Get(); item != (key{Cluster: "wharf", Name: "present"}) {
		t.Errorf("queued %v, want the present pod", item)
	}
	r.queues["wharf"].ShutDown()

	// Once it has passed: the pod that came is resumed, the other row lost.
	addPod("arrives")
	r = newReconciler(time.Nanosecond)
	rows := []store.WorkPod{}
	for _, id := range []string{"arrives", "never"} {
		row, _ := st.GetWorkPod(t.Context(), id)
		rows = append(rows, row)
	}
	r.recheck(t.Context(), "wharf", rows)
	if got := state("never"); got != store.StateLost {
		t.Errorf("row without a pod after the grace: %s, want lost", got)
	}
	if got := state("arrives"); got != store.StatePending {
		t.Errorf("row whose pod came: %s, want pending (resumed, not judged)", got)
	}
	if item, _ := r.queues["wharf"].Get(); item != (key{Cluster: "wharf", Name: "arrives"}) {
		t.Errorf("queued %v, want the pod that came", item)
	}
	r.queues["wharf"].ShutDown()

	// One replica (no grace): a missing pod is lost at once.
	if _, err := st.CreateWorkPod(t.Context(), store.WorkPod{ID: "gone", Cluster: "wharf", Namespace: "loops", Kind: "turn", State: store.StateDispatched, PodUID: "u"}); err != nil {
		t.Fatal(err)
	}
	r = newReconciler(0)
	r.startupReconcile(t.Context(), "wharf", time.Now().Add(time.Second))
	if got := state("gone"); got != store.StateLost {
		t.Errorf("missing pod with no grace: %s, want lost", got)
	}
	r.queues["wharf"].ShutDown()
}

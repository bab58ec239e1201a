package reconcile

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"crucible.dev/crucible/internal/store"
	"crucible.dev/crucible/internal/store/storetest"
	"crucible.dev/crucible/internal/workpod"
)

// TestStartupReconcilePages: the startup reconcile reads its rows a page at
// a time and still judges every live row of the cluster once — across page
// boundaries, with rows marked lost between pages — and no other.
func TestStartupReconcilePages(t *testing.T) {
	st := storetest.SQLite(t)
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	const n = 2*startupPage + 7
	wantQueued := map[key]bool{}
	var gone []string
	for i := range n {
		id := fmt.Sprintf("p%05d", i)
		if _, err := st.CreateWorkPod(t.Context(), store.WorkPod{ID: id, Cluster: "wharf", Namespace: "loops", Kind: "turn", State: store.StateRunning, PodUID: "u-" + id}); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			gone = append(gone, id)
			continue
		}
		wantQueued[key{Cluster: "wharf", Name: id}] = true
		if err := indexer.Add(inCache(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: "loops", UID: types.UID("u-" + id)}})); err != nil {
			t.Fatal(err)
		}
	}
	others := []store.WorkPod{
		{ID: "on-dock", Cluster: "dock", Namespace: "loops", Kind: "turn", State: store.StateRunning, PodUID: "u"},
		{ID: "done", Cluster: "wharf", Namespace: "loops", Kind: "turn", State: store.StatePending},
	}
	for _, row := range others {
		if _, err := st.CreateWorkPod(t.Context(), row); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.TransitionWorkPod(t.Context(), "done", store.Transition{From: store.LiveStates, To: store.StateCancelled, Finish: true}); err != nil {
		t.Fatal(err)
	}
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[key]())
	r := &Reconciler{
		Store: st, Log: slog.New(slog.DiscardHandler),
		queues: map[string]workqueue.TypedRateLimitingInterface[key]{"wharf": q},
		caches: map[string]podCache{"wharf": {indexer: indexer, namespace: "loops"}},
	}
	defer q.ShutDown()
	r.startupReconcile(t.Context(), "wharf", time.Now().Add(time.Second))

	if got := q.Len(); got != len(wantQueued) {
		t.Errorf("queued %d keys, want %d", got, len(wantQueued))
	}
	for q.Len() > 0 {
		k, _ := q.Get()
		if !wantQueued[k] {
			t.Errorf("queued %v, not a row with a pod", k)
		}
		delete(wantQueued, k)
		q.Done(k)
	}
	if len(wantQueued) != 0 {
		t.Errorf("%d rows with pods not queued", len(wantQueued))
	}
	lost, err := st.ListWorkPods(t.Context(), store.Filter{States: []store.State{store.StateLost}})
	if err != nil {
		t.Fatal(err)
	}
	var lostIDs []string
	for _, row := range lost {
		lostIDs = append(lostIDs, row.ID)
	}
	slices.Sort(lostIDs)
	if diff := cmp.Diff(gone, lostIDs); diff != "" {
		t.Errorf("rows lost (-want +got):\n%s", diff)
	}
}

// TestStartupNeverDispatchedRows: a row a submit persisted and never
// dispatched is not lost at startup — its pod never existed. One whose
// secret files the store did not keep waits for a replay of its submit
// when it has an Idempotency-Key (saying so) and fails without one; a spec
// that cannot be read or is not valid fails; a dispatched row whose pod is
// gone is still lost. (Dispatching one from its spec needs a spoke: the
// e2e test TestSubmitCutBeforeDispatchRuns.)
func TestStartupNeverDispatchedRows(t *testing.T) {
	st := storetest.SQLite(t)
	spec := func(w workpod.WorkPod) []byte {
		b, err := workpod.EncodeStored(w, []byte("test-digest-key"))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	withSecret := spec(workpod.WorkPod{ID: "x", Kind: "turn", Image: "busybox", SecretFiles: map[string]string{"token": "s3cret"}})
	rows := []store.WorkPod{
		{ID: "secret-keyed", State: store.StatePending, Spec: withSecret, Submitter: "alice", IdempotencyKey: "k"},
		{ID: "secret-unkeyed", State: store.StatePending, Spec: withSecret, Submitter: "alice"},
		{ID: "garbled", State: store.StatePending, Spec: []byte(`{"id":`), Submitter: "alice"},
		{ID: "invalid", State: store.StatePending, Spec: spec(workpod.WorkPod{ID: "invalid", Kind: "turn"}), Submitter: "alice"},
		{ID: "vanished", State: store.StateDispatched, PodUID: "u-vanished", Spec: spec(workpod.WorkPod{ID: "vanished", Kind: "turn", Image: "busybox"})},
	}
	for _, row := range rows {
		row.Cluster, row.Namespace, row.Kind = "wharf", "loops", "turn"
		if _, err := st.CreateWorkPod(t.Context(), row); err != nil {
			t.Fatal(err)
		}
	}
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[key]())
	defer q.ShutDown()
	r := &Reconciler{
		Store: st, Log: slog.New(slog.DiscardHandler),
		queues: map[string]workqueue.TypedRateLimitingInterface[key]{"wharf": q},
		caches: map[string]podCache{"wharf": {indexer: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}), namespace: "loops"}},
	}
	r.startupReconcile(t.Context(), "wharf", time.Now().Add(time.Second))

	want := map[string]struct {
		state  store.State
		reason string // a prefix
	}{
		"secret-keyed":   {store.StatePending, reasonAwaitingReplay},
		"secret-unkeyed": {store.StateFailed, reasonCannotRedispatch},
		"garbled":        {store.StateFailed, "not dispatched: its stored spec cannot be read: "},
		"invalid":        {store.StateFailed, "not dispatched: its stored spec is not valid: "},
		"vanished":       {store.StateLost, "pod not found on wharf at startup"},
	}
	for id, w := range want {
		got, err := st.GetWorkPod(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != w.state || !strings.HasPrefix(got.Reason, w.reason) {
			t.Errorf("%s: %s %q, want %s %q", id, got.State, got.Reason, w.state, w.reason)
		}
	}
	if q.Len() != 0 {
		t.Errorf("queued %d keys; no row has a pod", q.Len())
	}
}

package reconcile

import (
	"encoding/json"
	"encoding/pem"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"crucible.dev/crucible/internal/dispatch"
	"crucible.dev/crucible/internal/fleet"
	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/retry"
	"crucible.dev/crucible/internal/store"
	"crucible.dev/crucible/internal/store/storetest"
	"crucible.dev/crucible/internal/workpod"
)

// specWith is the stored spec of a work pod of class with maxPending
// seconds, as the API stores it (the submission embeds workpod.WorkPod).
func specWith(t *testing.T, class string, maxPending int64) []byte {
	t.Helper()
	spec, err := json.Marshal(workpod.WorkPod{ID: "p1", Kind: workpod.KindTurn, Image: "busybox",
		Shape: workpod.Shape{Class: class, DeadlineSeconds: 3600, MaxPendingSeconds: maxPending, RunAsUser: 65532}})
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// TestDecidePending: a live row waiting Unschedulable is failed once its
// class's max_pending has passed since the wait began, and looked at again
// when it will have; no other wait, no limit, and no other pod's wait
// counts.
func TestDecidePending(t *testing.T) {
	since := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	gpu := specWith(t, "gpu", 600)
	row := func(state store.State, uid string, spec []byte, w *store.Waiting) *store.WorkPod {
		r := testRow(state, uid)
		r.Spec, r.Waiting = spec, w
		return r
	}
	waits := func(reason, message string) *store.Waiting {
		return &store.Waiting{Reason: reason, Message: message, Since: since}
	}
	gated := inCache(podWith(corev1.PodPending, "", scheduledFalse("Unschedulable", unschedulable)))
	failed := waitLimit{Passed: true, Reason: "unschedulable for 10m0s (class gpu max_pending): " + unschedulable}
	tests := []struct {
		name    string
		cluster string
		row     *store.WorkPod
		pod     *cachedPod
		now     time.Time
		want    waitLimit
	}{
		{"within the limit", "wharf", row(store.StateDispatched, "u1", gpu, waits("Unschedulable", unschedulable)), gated, since.Add(4 * time.Minute),
			waitLimit{Recheck: 6 * time.Minute}},
		{"at the limit", "wharf", row(store.StateDispatched, "u1", gpu, waits("Unschedulable", unschedulable)), gated, since.Add(10 * time.Minute), failed},
		{"past the limit", "wharf", row(store.StateDispatched, "u1", gpu, waits("Unschedulable", unschedulable)), gated, since.Add(time.Hour), failed},
		{"the scheduler said no more", "wharf", row(store.StateDispatched, "u1", gpu, waits("Unschedulable", "")), gated, since.Add(time.Hour),
			waitLimit{Passed: true, Reason: "unschedulable for 10m0s (class gpu max_pending)"}},
		{"pending row, pod not attached yet", "wharf", row(store.StatePending, "", gpu, waits("Unschedulable", unschedulable)), gated, since.Add(time.Hour), failed},
		{"its pod gone from the cache", "wharf", row(store.StateDispatched, "u1", gpu, waits("Unschedulable", unschedulable)), nil, since.Add(time.Hour), failed},
		{"another wait", "wharf", row(store.StateDispatched, "u1", gpu, waits("ImagePullBackOff", "back-off")), gated, since.Add(time.Hour), waitLimit{}},
		{"no wait", "wharf", row(store.StateDispatched, "u1", gpu, nil), gated, since.Add(time.Hour), waitLimit{}},
		{"a class without a limit", "wharf", row(store.StateDispatched, "u1", specWith(t, "gpu", 0), waits("Unschedulable", unschedulable)), gated,
			since.Add(time.Hour), waitLimit{}},
		{"a spec from before shapes were kept", "wharf", row(store.StateDispatched, "u1", []byte(`{"id":"p1","kind":"turn","image":"busybox"}`),
			waits("Unschedulable", unschedulable)), gated, since.Add(time.Hour), waitLimit{}},
		{"no spec", "wharf", row(store.StateDispatched, "u1", nil, waits("Unschedulable", unschedulable)), gated, since.Add(time.Hour), waitLimit{}},
		{"finished row", "wharf", row(store.StateCancelled, "u1", gpu, waits("Unschedulable", unschedulable)), gated, since.Add(time.Hour), waitLimit{}},
		{"another pod of the name", "wharf", row(store.StateDispatched, "u2", gpu, waits("Unschedulable", unschedulable)), gated, since.Add(time.Hour), waitLimit{}},
		{"a row of another cluster", "dock", row(store.StateDispatched, "u1", gpu, waits("Unschedulable", unschedulable)), gated, since.Add(time.Hour), waitLimit{}},
		{"no row", "wharf", nil, gated, since.Add(time.Hour), waitLimit{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := decidePending(syncFacts{Cluster: tt.cluster, Row: tt.row, Pod: tt.pod}, tt.now)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("decidePending (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSyncFailsPodUnschedulablePastMaxPending: sync records the wait and
// queues the row again for when its class's max_pending passes — no watch
// event comes for a pod that stays unschedulable. Then the pod is deleted
// on its spoke (by its uid) and the row failed with the scheduler's
// message; a delete the spoke refuses leaves the row live and waiting, to
// be tried again. The pod's going, seen afterwards, does not make the row
// lost.
func TestSyncFailsPodUnschedulablePastMaxPending(t *testing.T) {
	f := newMaxPendingFixture(t)
	k := key{Cluster: "wharf", Name: "p1"}
	gated := podWith(corev1.PodPending, "", scheduledFalse("Unschedulable", unschedulable))
	gated.Namespace = "loops"
	if err := f.indexer.Add(inCache(gated)); err != nil {
		t.Fatal(err)
	}
	if err := f.r.sync(t.Context(), k); err != nil {
		t.Fatalf("sync: %v", err)
	}
	waiting := f.row(t)
	if waiting.State != store.StateDispatched || waiting.Waiting == nil || len(f.spoke.deletes()) != 0 {
		t.Fatalf("after the first sync: state %s waiting %+v deletes %v; want dispatched, waiting, nothing deleted", waiting.State, waiting.Waiting, f.spoke.deletes())
	}
	if got, after := f.requeued(t); got != k || after.Sub(waiting.Waiting.Since) < time.Second {
		t.Fatalf("requeued %v after %v of waiting, want %v once max_pending (1s) passed", got, after.Sub(waiting.Waiting.Since), k)
	}

	f.spoke.refuse(true)
	if err := f.r.sync(t.Context(), k); err == nil {
		t.Fatal("sync with the delete refused: no error, want one (the row is requeued with backoff)")
	}
	if still := f.row(t); still.State != store.StateDispatched || still.Waiting == nil {
		t.Fatalf("after a refused delete: state %s waiting %+v, want dispatched and still waiting", still.State, still.Waiting)
	}
	f.spoke.refuse(false)
	if err := f.r.sync(t.Context(), k); err != nil {
		t.Fatalf("sync: %v", err)
	}
	wantReason := "unschedulable for 1s (class gpu-short max_pending): " + unschedulable
	done := f.row(t)
	if done.State != store.StateFailed || done.Reason != wantReason || done.FinishedAt == nil || done.Waiting != nil {
		t.Errorf("row: state %s reason %q finished %v waiting %+v; want failed for %q, finished, waiting for nothing",
			done.State, done.Reason, done.FinishedAt, done.Waiting, wantReason)
	}
	if diff := cmp.Diff([]string{"p1 u1", "p1 u1"}, f.spoke.deletes()); diff != "" {
		t.Errorf("deletes on the spoke (name uid) (-want +got):\n%s", diff)
	}
	h, err := f.r.Store.PodHistory(t.Context(), "p1")
	if err != nil {
		t.Fatal(err)
	}
	if last := h[len(h)-1]; last.Event != store.EventState || last.State != store.StateFailed || last.Reason != wantReason {
		t.Errorf("last history entry %+v, want the row failed for %q", last, wantReason)
	}

	if err := f.indexer.Delete(inCache(gated)); err != nil {
		t.Fatal(err)
	}
	if err := f.r.sync(t.Context(), k); err != nil {
		t.Fatalf("sync after the pod went: %v", err)
	}
	if gone := f.row(t); gone.State != store.StateFailed || gone.Reason != wantReason {
		t.Errorf("after the pod went: state %s reason %q, want it still failed for max_pending", gone.State, gone.Reason)
	}
}

// maxPendingFixture is a reconciler of cluster wharf with a real (SQLite)
// store holding row p1 — dispatched as pod u1, of class gpu-short with a
// max_pending of 1 s — an informer cache to put its pod in, wharf's queue,
// and a spoke that deletes pods.
type maxPendingFixture struct {
	r       *Reconciler
	spoke   *deleteSpoke
	indexer cache.Indexer
	queue   workqueue.TypedRateLimitingInterface[key]
}

func newMaxPendingFixture(t *testing.T) *maxPendingFixture {
	t.Helper()
	st := storetest.SQLite(t)
	if _, err := st.CreateWorkPod(t.Context(), store.WorkPod{ID: "p1", Cluster: "wharf", Namespace: "loops", Kind: "turn",
		State: store.StateDispatched, PodUID: "u1", Spec: specWith(t, "gpu-short", 1)}); err != nil {
		t.Fatal(err)
	}
	f := &maxPendingFixture{
		spoke:   newDeleteSpoke(t),
		indexer: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}),
		queue:   workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[key]()),
	}
	t.Cleanup(f.queue.ShutDown)
	f.r = &Reconciler{
		Store: st, Log: slog.New(slog.DiscardHandler),
		Dispatcher: &dispatch.Dispatcher{Clients: f.spoke.clients(t, "wharf"), Retry: retry.Policy{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond, Budget: time.Second}},
		caches:     map[string]podCache{"wharf": {indexer: f.indexer, namespace: "loops"}},
		queues:     map[string]workqueue.TypedRateLimitingInterface[key]{"wharf": f.queue},
	}
	return f
}

func (f *maxPendingFixture) row(t *testing.T) store.WorkPod {
	t.Helper()
	got, err := f.r.Store.GetWorkPod(t.Context(), "p1")
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// requeued waits for the next key wharf's queue hands out and says when.
func (f *maxPendingFixture) requeued(t *testing.T) (key, time.Time) {
	t.Helper()
	got := make(chan key, 1)
	go func() {
		if k, shutdown := f.queue.Get(); !shutdown {
			got <- k
		}
	}()
	select {
	case k := <-got:
		f.queue.Done(k)
		return k, time.Now()
	case <-time.After(10 * time.Second):
		t.Fatal("the row was not queued again for its max_pending")
	}
	return key{}, time.Time{}
}

// deleteSpoke is a spoke's API server as a pod delete sees it: it answers
// DELETE of a pod in namespace loops, recording the delete's uid
// precondition, and refuses it (403, from a ready server) while told to.
type deleteSpoke struct {
	srv *httptest.Server

	mu      sync.Mutex
	refused bool
	calls   []string // "name uid"
}

func newDeleteSpoke(t *testing.T) *deleteSpoke {
	t.Helper()
	s := &deleteSpoke{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("DELETE /api/v1/namespaces/loops/pods/{name}", func(w http.ResponseWriter, req *http.Request) {
		var opts metav1.DeleteOptions
		body, err := io.ReadAll(req.Body)
		if err == nil {
			// client-go sends protobuf or JSON; the API server takes both.
			_, _, err = scheme.Codecs.UniversalDeserializer().Decode(body, nil, &opts)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		uid := ""
		if p := opts.Preconditions; p != nil && p.UID != nil {
			uid = string(*p.UID)
		}
		s.mu.Lock()
		s.calls = append(s.calls, req.PathValue("name")+" "+uid)
		refused := s.refused
		s.mu.Unlock()
		status := metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusSuccess}
		if refused {
			status.Status, status.Code, status.Reason = metav1.StatusFailure, http.StatusForbidden, metav1.StatusReasonForbidden
			status.Message = `pods "` + req.PathValue("name") + `" is forbidden`
		}
		w.Header().Set("Content-Type", "application/json")
		if refused {
			w.WriteHeader(http.StatusForbidden)
		}
		_ = json.NewEncoder(w).Encode(status)
	})
	s.srv = httptest.NewTLSServer(mux)
	t.Cleanup(s.srv.Close)
	return s
}

// clients are the fleet's clients of one cluster, name, served by s.
func (s *deleteSpoke) clients(t *testing.T, name string) *fleet.Clients {
	t.Helper()
	dir := t.TempDir()
	caFile, tokenFile := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "token")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tokenFile, []byte("controller-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	clients, err := fleet.NewClients([]profile.ClusterEntry{{Name: name, Server: s.srv.URL, CAFile: caFile, TokenFile: tokenFile,
		LoopNamespace: "loops", QPS: 1e6, Burst: 1e6}})
	if err != nil {
		t.Fatal(err)
	}
	return clients
}

func (s *deleteSpoke) refuse(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refused = on
}

func (s *deleteSpoke) deletes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.calls...)
}

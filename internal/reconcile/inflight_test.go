package reconcile

import (
	"slices"
	"testing"

	"k8s.io/client-go/util/workqueue"
)

// TestInflightPutsOffSyncs: a sync of a row whose dispatch is in flight is
// put off, once per cluster, and owed when the last dispatch of it ends;
// after that, and for any other row, syncs run at once.
func TestInflightPutsOffSyncs(t *testing.T) {
	var f inflight
	if f.putOff("wharf", "p1") {
		t.Fatal("a row with no dispatch in flight was put off")
	}
	f.begin("p1")
	f.begin("p1") // a replay dispatching the same row meanwhile
	for _, c := range []string{"wharf", "wharf", "dock"} {
		if !f.putOff(c, "p1") {
			t.Fatalf("sync of p1 on %s ran while its dispatch was in flight", c)
		}
	}
	if f.putOff("wharf", "p2") {
		t.Error("another row's sync was put off")
	}
	if owed := f.end("p1"); owed != nil {
		t.Errorf("first of two dispatches ended: owed %v, want none until the last", owed)
	}
	if !f.putOff("wharf", "p1") {
		t.Error("sync ran while the second dispatch was still in flight")
	}
	if owed := f.end("p1"); !slices.Equal(owed, []string{"wharf", "dock"}) {
		t.Errorf("last dispatch ended: owed %v, want [wharf dock], each once", owed)
	}
	if f.putOff("wharf", "p1") {
		t.Error("sync put off after the dispatch ended")
	}
	if owed := f.end("p1"); owed != nil {
		t.Errorf("an end without a dispatch owed %v", owed)
	}
}

// TestDispatchingQueuesPutOffSyncs: done queues the syncs put off during the
// dispatch on their clusters' queues, once however often it is called, and
// queues nothing for a dispatch no event came during.
func TestDispatchingQueuesPutOffSyncs(t *testing.T) {
	r := &Reconciler{queues: map[string]workqueue.TypedRateLimitingInterface[key]{}}
	q := workqueue.NewTypedRateLimitingQueue(rowRateLimiter())
	defer q.ShutDown()
	r.queues["wharf"] = q

	quiet := r.Dispatching("p0")
	done := r.Dispatching("p1")
	if err := r.sync(t.Context(), key{Cluster: "wharf", Name: "p1"}); err != nil {
		t.Fatalf("put-off sync: %v", err) // it reads nothing: the reconciler has no store
	}
	if q.Len() != 0 {
		t.Fatalf("queue holds %d before the dispatch ended", q.Len())
	}
	quiet()
	done()
	done()
	if q.Len() != 1 {
		t.Fatalf("queue holds %d after done, want p1 once", q.Len())
	}
	if k, _ := q.Get(); k != (key{Cluster: "wharf", Name: "p1"}) {
		t.Errorf("queued %v, want wharf/p1", k)
	}
}

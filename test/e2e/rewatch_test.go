package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/reconcile"
	"crucible.dev/crucible/internal/store"
)

// watchRetry is one reconnect of a pod watch, as OnWatchRetry reports it.
type watchRetry struct {
	attempt int
	delay   time.Duration
}

// A spoke whose API server goes down twice in a row is watched again
// after each outage with delays that stop growing at a few seconds, and
// each outage's reconnects start from the first attempt: the backoff was
// reset by the watch established in between. client-go's reflector carried
// its backoff across the outages (reset only after two quiet minutes) and
// resumed up to a minute late. Before and after each outage the watch
// delivers a new pod's event, recorded in its row.
func TestPodWatchReconnectsPromptlyAfterOutages(t *testing.T) {
	s := sharedStack(t)
	wharf := s.Spoke("wharf")
	entry := s.ClusterEntry(wharf)
	var mu sync.Mutex
	var retries []watchRetry
	iso := isolatedReconciler(t, s, entry.Server, entry.CAFile, time.Minute, func(r *reconcile.Reconciler) {
		r.OnWatchRetry = func(cluster string, attempt int, delay time.Duration) {
			if cluster != "wharf" {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			retries = append(retries, watchRetry{attempt, delay})
		}
	})
	seen := func() []watchRetry {
		mu.Lock()
		defer mu.Unlock()
		return append([]watchRetry(nil), retries...)
	}
	watched(t, iso, wharf, "rewatch-0-"+suffix()) // watching before the first outage

	restoreSpokeAfter(t, s, wharf)
	var outages [][]watchRetry
	for i := range 2 {
		before := len(seen())
		if err := s.StopAPIServer(wharf); err != nil {
			t.Fatal(err)
		}
		// Down until the watch has failed a few times.
		err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return len(seen())-before >= 3, nil
		})
		if err != nil {
			t.Fatalf("outage %d: the watch of wharf retried %d times in a minute of its API server down", i+1, len(seen())-before)
		}
		if err := s.StartAPIServer(t.Context(), wharf); err != nil {
			t.Fatal(err)
		}
		if err := wharf.Ready(t.Context()); err != nil {
			t.Fatal(err)
		}
		watched(t, iso, wharf, fmt.Sprintf("rewatch-%d-%s", i+1, suffix()))
		outages = append(outages, seen()[before:])
	}
	for i, o := range outages {
		if o[0].attempt != 1 {
			t.Errorf("outage %d began at attempt %d, want 1: the backoff of the outage before was not reset by the watch in between (%v)", i+1, o[0].attempt, o)
		}
		for _, r := range o {
			if r.delay > 4*time.Second {
				t.Errorf("outage %d: attempt %d waited %v, more than the 4 s cap (%v)", i+1, r.attempt, r.delay, o)
			}
		}
	}
}

// watched creates a pod called name on wharf and waits until its row has
// the pod's uid, which only the pod's watch event records: the watch is
// established. It needs nothing of the spoke but its API server (the pod
// need not run).
func watched(t *testing.T, iso isolated, wharf *devstack.Cluster, name string) {
	t.Helper()
	iso.Run(wharf, name, "sleep 600")
	var row store.WorkPod
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		row, err = iso.Store.GetWorkPod(ctx, name)
		return err == nil && row.PodUID != "", nil
	})
	if err != nil {
		t.Fatalf("row %s is %s without its pod's uid: the watch of wharf never delivered the pod", name, row.State)
	}
}

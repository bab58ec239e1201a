package e2e

// A pod class's max_pending on the dev stack's real kube-scheduler: the
// stack's "gpu-short" class (devstack's podClasses) gives up on a pod the
// scheduler has not placed for 10 s.

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/store"
)

// A gpu-short pod asking 5 GPUs (wharf's GPU node has 4) waits
// Unschedulable; 10 s later, with no event from the spoke to prompt it,
// its pod is deleted on wharf and its row failed — not cancelled: nobody
// asked — for max_pending, with the scheduler's message, and its history
// ends with that. It was pinned to wharf, so its class's spill_after (5 s)
// never moved it. The class is withheld on dock, as gpu is.
func TestMaxPendingFailsUnschedulablePod(t *testing.T) {
	s := sharedStack(t)
	wp := submit(t, s, apiv1.SubmitRequest{Cluster: "wharf", Image: "busybox", Command: sleeps("1h"), Class: "gpu-short", GPUs: new(5)})
	t.Cleanup(func() { cancelPodQuietly(s, wp.ID) })

	waiting := waitWaiting(t, s, wp.ID, time.Minute)
	if w := waiting.Waiting; w.Reason != "Unschedulable" || !strings.Contains(w.Message, "Insufficient nvidia.com/gpu") {
		t.Fatalf("waiting %+v, want Unschedulable saying Insufficient nvidia.com/gpu", w)
	}
	failed := waitState(t, s, wp.ID, "failed", time.Minute)
	const prefix = "unschedulable for 10s (class gpu-short max_pending): "
	if !strings.HasPrefix(failed.Reason, prefix) || !strings.Contains(failed.Reason, "Insufficient nvidia.com/gpu") {
		t.Errorf("reason %q, want %q and the scheduler's Insufficient nvidia.com/gpu", failed.Reason, prefix+"…")
	}
	if failed.FinishedAt == nil || failed.FinishedAt.Sub(waiting.Waiting.Since) < 10*time.Second || failed.Waiting != nil {
		t.Errorf("finished at %v, waiting since %v, waiting now %+v; want finished at least 10s into the wait, waiting no more",
			failed.FinishedAt, waiting.Waiting.Since, failed.Waiting)
	}
	if last := failed.History[len(failed.History)-1]; last.Event != store.EventState || last.State != store.StateFailed || last.Reason != failed.Reason {
		t.Errorf("last history entry %+v, want the row failed for %q", last, failed.Reason)
	}
	checkTimes(t, failed)
	for _, h := range failed.History {
		if h.Event == store.EventMoved || failed.Cluster != "wharf" || failed.Placement != nil {
			t.Errorf("a pinned pod moved: on %s, placement %+v, entry %+v", failed.Cluster, failed.Placement, h)
		}
	}

	if err := waitPodGone(t, s.Spoke("wharf"), wp.ID, 30*time.Second); err != nil {
		t.Errorf("pod %s still on wharf after its row failed for max_pending: %v", wp.ID, err)
	}

	code, body := apiCall(t, s, http.MethodPost, "/api/pods", apiv1.SubmitRequest{Cluster: "dock", Image: "busybox", Class: "gpu-short"})
	var refusal struct{ Error, Field string }
	if err := json.Unmarshal(body, &refusal); err != nil || code != http.StatusUnprocessableEntity ||
		refusal.Field != "class" || refusal.Error != `class "gpu-short" is not offered on cluster "dock"` {
		t.Errorf("gpu-short on dock: %d %s, want 422 naming the class and the cluster", code, body)
	}
}

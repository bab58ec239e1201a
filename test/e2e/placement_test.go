package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/devstack"
)

// capacityOf polls GET /api/capacity until cond holds for cluster's entry
// (its view synced first), failing the test after within.
func capacityOf(t *testing.T, s *devstack.Stack, cluster, what string, within time.Duration, cond func(apiv1.ClusterCapacity) bool) apiv1.ClusterCapacity {
	t.Helper()
	var last apiv1.ClusterCapacity
	err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, within, true, func(context.Context) (bool, error) {
		code, body := apiCall(t, s, http.MethodGet, "/api/capacity", nil)
		if code != http.StatusOK {
			t.Fatalf("GET /api/capacity: %d %s", code, body)
		}
		var all []apiv1.ClusterCapacity
		if err := json.Unmarshal(body, &all); err != nil {
			t.Fatal(err)
		}
		for _, c := range all {
			if c.Cluster == cluster {
				last = c
				return c.Synced && cond(c), nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%s's capacity: %s not within %s (last %+v)", cluster, what, within, last)
	}
	return last
}

func gpusFree(c apiv1.ClusterCapacity) (free, total int64) {
	for _, g := range c.GPUs {
		free, total = free+g.Free, total+g.Total
	}
	return free, total
}

// On the shared stack (wharf: a 4-GPU node; dock: no GPUs and the gpu
// class withheld), a gpu pod placed with cluster "auto" goes to wharf,
// whose view says a node takes it, keeps the decision naming both spokes,
// and runs; a pod no node takes now is refused with 409 and every spoke's
// reason when strict, and otherwise waits where most GPUs are.
func TestPlacementAutoOnSharedStack(t *testing.T) {
	s := sharedStack(t)
	// Other tests' GPU pods, cancelled as they ended, free their GPUs as
	// the spoke deletes them: the view shows all four free then.
	capacityOf(t, s, "wharf", "its 4 GPUs free", time.Minute, func(c apiv1.ClusterCapacity) bool { free, total := gpusFree(c); return free == 4 && total == 4 })
	wp := submit(t, s, apiv1.SubmitRequest{Cluster: apiv1.ClusterAuto, Image: "busybox", Command: sleeps("1h"), Class: "gpu"})
	t.Cleanup(func() { cancelPodQuietly(s, wp.ID) })
	if wp.Cluster != "wharf" || wp.Placement == nil || wp.Placement.Waits {
		t.Fatalf("placed on %s with %+v, want wharf, fitting", wp.Cluster, wp.Placement)
	}
	if d := wp.Placement.Decision; !strings.HasPrefix(d, "wharf: fits (") || !strings.Contains(d, `dock: class "gpu" is not offered on cluster "dock"`) {
		t.Errorf("decision %q", d)
	}
	waitRunning(t, s, wp.ID)
	if got := getPod(t, s, wp.ID).Placement; got == nil || got.Decision != wp.Placement.Decision {
		t.Errorf("the pod's placement read back %+v, want %q", got, wp.Placement.Decision)
	}

	// No node has 5 GPUs now: strict refuses, naming wharf's reason; else
	// the pod waits on the spoke with the most GPUs for it.
	big := apiv1.SubmitRequest{Cluster: apiv1.ClusterAuto, Placement: apiv1.PlacementStrict, Image: "busybox", Command: sleeps("1h"), Class: "gpu", GPUs: new(5)}
	code, body := apiCall(t, s, http.MethodPost, "/api/pods", big)
	if code != http.StatusConflict || !strings.Contains(string(body), "no cluster fits the pod now") || !strings.Contains(string(body), "wharf: 0/2 nodes fit: 1 didn't match node selector/affinity, 1 too little nvidia.com/gpu (most free 3 of 4, needs 5)") {
		t.Errorf("a strict 5-GPU auto pod: %d %s, want 409 with wharf's reason", code, body)
	}
	big.Placement = ""
	waits := submit(t, s, big)
	t.Cleanup(func() { cancelPodQuietly(s, waits.ID) })
	if waits.Cluster != "wharf" || waits.Placement == nil || !waits.Placement.Waits {
		t.Errorf("a 5-GPU auto pod placed on %s with %+v, want waiting on wharf", waits.Cluster, waits.Placement)
	}
}

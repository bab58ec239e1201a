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
// and runs; a pod no node of any spoke could ever take is refused with
// 409 and every spoke's reason.
func TestPlacementAutoOnSharedStack(t *testing.T) {
	s := sharedStack(t)
	wharf := capacityOf(t, s, "wharf", "a GPU free", time.Minute, func(c apiv1.ClusterCapacity) bool { free, _ := gpusFree(c); return free >= 1 })
	if _, total := gpusFree(wharf); total != 4 {
		t.Errorf("wharf's GPUs: %+v, want 4 in all", wharf.GPUs)
	}
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

	code, body := apiCall(t, s, http.MethodPost, "/api/pods", apiv1.SubmitRequest{Cluster: apiv1.ClusterAuto, Image: "busybox", Command: sleeps("1h"), Class: "gpu", GPUs: new(5)})
	if code != http.StatusConflict || !strings.Contains(string(body), "no cluster can take the pod") || !strings.Contains(string(body), "wharf: ") || !strings.Contains(string(body), "nvidia.com/gpu") {
		t.Errorf("a 5-GPU auto pod: %d %s, want 409 with wharf's reason", code, body)
	}
}

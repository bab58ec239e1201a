package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
	"crucible.dev/crucible/internal/store"
)

// Spill-over (issue 39) on a stack of its own (make acceptance): wharf has
// one 4-GPU node and no capacity view (capacity off: its RBAC grants
// nothing beyond today's), dock one 8-GPU node with a view. A 5-GPU
// gpu-short pod preferring wharf is placed there — no view says it cannot
// fit — and waits Unschedulable; after the class's spill_after (5 s) it is
// deleted there, confirmed gone, and placed again on dock, where it runs.
// Listing both spokes throughout finds at most one pod for the row; the
// pod's history and placement show the move.
func TestPlacementSpillsOver(t *testing.T) {
	t.Parallel()
	spokes := []devstack.SpokeOptions{{Name: "wharf", NoCapacity: true}, {Name: "dock"}}
	devstack.WithGPUNodes(spokes, []devstack.GPUPool{
		{Spoke: "wharf", Nodes: 1, GPUs: 4, Product: devstack.DefaultGPUProduct},
		{Spoke: "dock", Nodes: 1, GPUs: 8, Product: "NVIDIA-H100-80GB-HBM3"},
	})
	s := ownStack(t, devstack.Options{Crucible: devstacktest.BuildCrucible, Spokes: spokes})
	capacityOf(t, s, "dock", "synced", 2*time.Minute, func(apiv1.ClusterCapacity) bool { return true })

	wp := submit(t, s, apiv1.SubmitRequest{Clusters: []string{"wharf", "dock"}, Image: "busybox", Command: sleeps("1h"), Class: "gpu-short", GPUs: new(5)})
	t.Cleanup(func() { cancelPodQuietly(s, wp.ID) })
	if wp.Cluster != "wharf" || wp.Placement == nil || wp.Placement.Waits || !strings.HasPrefix(wp.Placement.Decision, "wharf: no capacity view; dock: fits") {
		t.Fatalf("placed on %s with %+v, want wharf (no view) first", wp.Cluster, wp.Placement)
	}

	// Both spokes are listed until the pod runs: never two pods at once.
	var most atomic.Int32
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			n := int32(0)
			// dock first: the pod is created there only after it was
			// confirmed gone from wharf, so a pod dock shows is never
			// counted again by the later list of wharf. Listed the
			// other way round, a move between the two lists would
			// count one pod twice (ci17, seed 1796434440520647618).
			for _, name := range []string{"dock", "wharf"} {
				list, err := s.Spoke(name).Client.CoreV1().Pods(devstack.SpokeNamespace).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + wp.ID})
				if err != nil {
					return false, nil // the next poll lists again; a missed list cannot hide a pod that stays
				}
				n += int32(len(list.Items))
			}
			if n > most.Load() {
				most.Store(n)
			}
			return false, nil
		})
	}()
	waitRunning(t, s, wp.ID)
	stop()
	<-done
	if n := most.Load(); n != 1 {
		t.Errorf("at most %d pods for the row at once on wharf and dock, want 1", n)
	}

	got := getPod(t, s, wp.ID)
	if got.Cluster != "dock" || got.Placement == nil || len(got.Placement.Moves) != 1 {
		t.Fatalf("after the move: on %s with %+v, want dock with one move", got.Cluster, got.Placement)
	}
	m := got.Placement.Moves[0]
	if m.From != "wharf" || m.To != "dock" || !strings.HasPrefix(m.Reason, "unschedulable on wharf for 5s (class gpu-short spill_after): 0/") {
		t.Errorf("move %+v, want wharf → dock for spill_after with the scheduler's message", m)
	}
	if want := "wharf: tried before; dock: fits (8 nvidia.com/gpu free)"; got.Placement.Decision != want {
		t.Errorf("the move's decision %q, want %q", got.Placement.Decision, want)
	}
	moved := false
	for _, h := range got.History {
		moved = moved || h.Event == store.EventMoved
	}
	if !moved {
		t.Errorf("history %+v has no move", got.History)
	}
	if _, err := s.Spoke("wharf").Client.CoreV1().Pods(devstack.SpokeNamespace).Get(t.Context(), wp.ID, metav1.GetOptions{}); err == nil {
		t.Error("the pod is still on wharf")
	}

	// A ResourceQuota on wharf allowing no GPUs: the create there is
	// refused for capacity, and the pod moves to dock at once, within its
	// submit.
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "no-gpus"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"requests." + devstack.ResourceGPU: resource.MustParse("0")}}}
	if _, err := s.Spoke("wharf").Client.CoreV1().ResourceQuotas(devstack.SpokeNamespace).Create(t.Context(), quota, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	refused := submitWhenQuotaActive(t, s, apiv1.SubmitRequest{Clusters: []string{"wharf", "dock"}, Image: "busybox", Command: sleeps("1h"), Class: "gpu-short"})
	t.Cleanup(func() { cancelPodQuietly(s, refused.ID) })
	got = getPod(t, s, refused.ID)
	if got.Cluster != "dock" || got.Placement == nil || len(got.Placement.Moves) != 1 {
		t.Fatalf("refused for quota on wharf: on %s with %+v, want dock with one move", got.Cluster, got.Placement)
	}
	if m := got.Placement.Moves[0]; m.From != "wharf" || m.To != "dock" || !strings.Contains(m.Reason, "exceeded quota") {
		t.Errorf("move %+v, want wharf → dock for the quota", m)
	}
	waitRunning(t, s, refused.ID)
}

// submitWhenQuotaActive submits req once wharf's quota controller has
// counted the namespace: until then the quota admits no pod at all, for
// want of a status, which is not a refusal for capacity.
func submitWhenQuotaActive(t *testing.T, s *devstack.Stack, req apiv1.SubmitRequest) apiv1.WorkPod {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		q, err := s.Spoke("wharf").Client.CoreV1().ResourceQuotas(devstack.SpokeNamespace).Get(ctx, "no-gpus", metav1.GetOptions{})
		return err == nil && q.Status.Hard != nil, nil
	})
	if err != nil {
		t.Fatalf("wharf's quota never got a status: %v", err)
	}
	return submit(t, s, req)
}

// Two replicas (sharded, on PostgreSQL) place twenty one-GPU pods at once,
// ten through each, onto wharf (one 4-GPU node) and dock (two 8-GPU
// nodes): twenty GPUs for twenty pods. Each replica counts the other's
// placements from the rows (api.Server.CountPlacements); a pod one of them
// still sent where the GPUs were gone waits there and spills over. Every
// pod runs exactly once (one start in its history) and succeeds; how many
// moved is reported.
func TestPlacementTwoReplicas(t *testing.T) {
	t.Parallel()
	spokes := []devstack.SpokeOptions{{Name: "wharf"}, {Name: "dock"}}
	devstack.WithGPUNodes(spokes, []devstack.GPUPool{
		{Spoke: "wharf", Nodes: 1, GPUs: 4, Product: devstack.DefaultGPUProduct},
		{Spoke: "dock", Nodes: 2, GPUs: 8, Product: "NVIDIA-H100-80GB-HBM3"},
	})
	s, _ := ownStackOnPostgres(t, devstack.Options{Crucible: devstacktest.BuildCrucible, LeaderElect: true, LeaseDuration: haLease,
		SweepInterval: time.Hour, OrphanGrace: time.Hour, Spokes: spokes})
	a, b := devstacktest.Replicas(t, s)
	for _, r := range []devstack.Replica{a, b} {
		for _, cluster := range []string{"wharf", "dock"} {
			replicaCapacity(t, r, cluster)
		}
	}

	ids, _ := submitVia(t, []devstack.Replica{a, b}, 20, 0, func(int) apiv1.SubmitRequest {
		return apiv1.SubmitRequest{Cluster: apiv1.ClusterAuto, Class: "gpu", Image: "busybox", Command: []string{"sh", "-c", "sleep 20; echo done"}}
	})
	err := wait.PollUntilContextTimeout(t.Context(), time.Second, 4*time.Minute, true, func(context.Context) (bool, error) {
		for _, id := range ids {
			code, body := haCall(t, a, http.MethodGet, "/api/pods/"+id, nil)
			var wp apiv1.WorkPod
			if code != http.StatusOK || json.Unmarshal(body, &wp) != nil || !wp.State.Terminal() {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("not every pod finished: %v", err)
	}
	moved, on := 0, map[string]int{}
	for _, id := range ids {
		code, body := haCall(t, b, http.MethodGet, "/api/pods/"+id, nil)
		var wp apiv1.WorkPod
		if err := json.Unmarshal(body, &wp); code != http.StatusOK || err != nil {
			t.Fatalf("%s: %d %s", id, code, body)
		}
		starts := 0
		for _, h := range wp.History {
			if h.Event == store.EventStarted {
				starts++
			}
		}
		if wp.State != store.StateSucceeded || starts != 1 {
			t.Errorf("%s on %s: %s (%s), started %d times; want succeeded, started once", id, wp.Cluster, wp.State, wp.Reason, starts)
		}
		if wp.Placement != nil {
			moved += len(wp.Placement.Moves)
		}
		on[wp.Cluster]++
	}
	t.Logf("20 pods placed through two replicas at once: ran %v; %d moved by spill-over", on, moved)
}

// replicaCapacity waits until replica r's view of cluster has synced.
func replicaCapacity(t *testing.T, r devstack.Replica, cluster string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		code, body := haCall(t, r, http.MethodGet, "/api/capacity", nil)
		var all []apiv1.ClusterCapacity
		if code != http.StatusOK || json.Unmarshal(body, &all) != nil {
			return false, nil
		}
		for _, c := range all {
			if c.Cluster == cluster {
				return c.Synced, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%s's view of %s never synced: %v", r.Process, cluster, err)
	}
}

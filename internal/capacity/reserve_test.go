package capacity

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

const ttl = time.Minute

func TestReserveBlocksTheLastGPU(t *testing.T) {
	v, _ := testView(t, []*corev1.Node{gpuNode("gpu-0", 4, a100)}, gpuPod("busy", 3, on("gpu-0")))
	first, second := gpuPod("first", 1), gpuPod("second", 1)
	if got := v.Judge(first); !got.Fits {
		t.Fatalf("first pod does not fit: %+v", got)
	}
	v.Reserve("work", "first", first, ttl)
	want := Verdict{Reason: "0 of 4 nvidia.com/gpu free (needs 1)", Resource: ResourceGPU, Total: 4}
	if diff := cmp.Diff(want, v.Judge(second)); diff != "" {
		t.Errorf("second Judge after the first reserved the last GPU (-want +got):\n%s", diff)
	}
	v.Reserve("work", "second", second, ttl) // fits nowhere: reserves nothing
	v.Release("work", "first")
	if got := v.Judge(second); !got.Fits || got.Free != 1 {
		t.Errorf("after Release: %+v, want it to fit with 1 free", got)
	}
}

// TestReserveGoesWhereMostIsFree: the reservation lands on the fitting node
// with the most free of the scarcest resource, as LeastAllocated spreads.
func TestReserveGoesWhereMostIsFree(t *testing.T) {
	v, _ := testView(t, []*corev1.Node{gpuNode("gpu-a", 8, h100), gpuNode("gpu-b", 8, h100)}, gpuPod("busy", 5, on("gpu-a")))
	v.Reserve("work", "p", gpuPod("p", 4), ttl)
	got := map[string]int64{}
	for _, s := range v.order {
		got[s.name] = s.free(ResourceGPU)
	}
	if diff := cmp.Diff(map[string]int64{"gpu-a": 3, "gpu-b": 4}, got); diff != "" {
		t.Errorf("free GPUs per node after the reservation (-want +got):\n%s", diff)
	}
}

// TestReservationEnds: a reservation ends when its pod shows bound (its
// own requests count from then on, on its real node), when it shows gone,
// and when its ttl passes; not while it waits unbound.
func TestReservationEnds(t *testing.T) {
	nodes := []*corev1.Node{gpuNode("gpu-a", 2, h100), gpuNode("gpu-b", 2, h100)}
	p := gpuPod("p", 2)
	t.Run("bound pod appears", func(t *testing.T) {
		v, _ := testView(t, nodes)
		v.Reserve("work", "p", p, ttl) // to gpu-a: the first of two equal nodes
		addPod(t, v, p)                // created, not yet scheduled
		assertFreeGPUs(t, v, "reserved while unbound", map[string]int64{"gpu-a": 0, "gpu-b": 2})
		updatePod(t, v, bound(p, "gpu-b")) // kube-scheduler chose the other node
		assertFreeGPUs(t, v, "bound", map[string]int64{"gpu-a": 2, "gpu-b": 0})
		if len(v.reservations) != 0 {
			t.Errorf("reservations left: %d", len(v.reservations))
		}
	})
	t.Run("pod deleted before it was bound", func(t *testing.T) {
		v, _ := testView(t, nodes)
		v.Reserve("work", "p", p, ttl)
		addPod(t, v, p)
		deletePod(t, v, p)
		assertFreeGPUs(t, v, "deleted", map[string]int64{"gpu-a": 2, "gpu-b": 2})
	})
	t.Run("ttl passes", func(t *testing.T) {
		v, clk := testView(t, nodes)
		v.Reserve("work", "p", p, ttl)
		clk.Step(ttl - time.Second)
		if got := v.Judge(gpuPod("q", 2)); got.Free != 2 {
			t.Errorf("before the ttl: %+v, want 2 free", got)
		}
		clk.Step(time.Second)
		if got := v.Judge(gpuPod("q", 2)); got.Free != 4 {
			t.Errorf("at the ttl: %+v, want 4 free", got)
		}
		if len(v.reservations) != 0 {
			t.Errorf("reservations left: %d", len(v.reservations))
		}
	})
	t.Run("pod bound already reserves nothing", func(t *testing.T) {
		v, _ := testView(t, nodes, bound(p, "gpu-b"))
		v.Reserve("work", "p", p, ttl)
		assertFreeGPUs(t, v, "bound before Reserve", map[string]int64{"gpu-a": 2, "gpu-b": 0})
	})
	t.Run("reserving again replaces", func(t *testing.T) {
		v, _ := testView(t, nodes)
		v.Reserve("work", "p", p, ttl)
		v.Reserve("work", "p", gpuPod("p", 1), ttl)
		if got := v.Judge(gpuPod("q", 1)); got.Free != 3 {
			t.Errorf("after reserving again: %+v, want 3 free", got)
		}
	})
}

// TestReserveUntil: a reservation with its end given keeps that end however
// often it is made again (another replica's placement, seen every second),
// and one whose end has passed reserves nothing.
func TestReserveUntil(t *testing.T) {
	nodes := []*corev1.Node{gpuNode("gpu-a", 2, h100)}
	p := gpuPod("p", 1)
	v, clk := testView(t, nodes)
	end := clk.Now().Add(ttl)
	v.ReserveUntil("work", "p", p, end)
	clk.Step(ttl - time.Second)
	v.ReserveUntil("work", "p", p, end) // seen again: still ends at end
	assertFreeGPUs(t, v, "before the end", map[string]int64{"gpu-a": 1})
	clk.Step(time.Second)
	v.ReserveUntil("work", "p", p, end)
	assertFreeGPUs(t, v, "at the end, made again", map[string]int64{"gpu-a": 2})
	if len(v.reservations) != 0 {
		t.Errorf("reservations left: %d", len(v.reservations))
	}
}

func TestReserveRefusesNonPositiveTTL(t *testing.T) {
	v, _ := testView(t, nil)
	defer func() {
		if recover() == nil {
			t.Error("Reserve with ttl 0 did not panic")
		}
	}()
	v.Reserve("work", "p", gpuPod("p", 1), 0)
}

func assertFreeGPUs(t *testing.T, v *View, when string, want map[string]int64) {
	t.Helper()
	got := map[string]int64{}
	for _, s := range v.order {
		got[s.name] = s.free(ResourceGPU)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s: free GPUs per node (-want +got):\n%s", when, diff)
	}
}

// Pods no node took yet are the spoke's queue: Queued sums what they ask
// of the judged pod's scarcest resource, and a pod leaves it once bound or
// gone.
func TestQueuedCountsUnboundPods(t *testing.T) {
	v, _ := testView(t, []*corev1.Node{gpuNode("gpu-a", 4, h100)}, gpuPod("running", 4, on("gpu-a")))
	waiting := []*corev1.Pod{gpuPod("w1", 2), gpuPod("w2", 4)}
	for _, p := range waiting {
		addPod(t, v, p)
	}
	addPod(t, v, pod("cpu-only", "cpu", "1")) // asks no GPU: not in the GPU queue
	if got := v.Judge(gpuPod("next", 1)); got.Fits || got.Queued != 6 || got.Total != 4 {
		t.Errorf("with 2 and 4 GPUs queued: %+v, want not fitting, Queued 6, Total 4", got)
	}
	updatePod(t, v, bound(waiting[0], "gpu-a"))
	deletePod(t, v, waiting[1])
	if got := v.Judge(gpuPod("next", 1)); got.Queued != 0 {
		t.Errorf("after one bound and one gone: Queued %d, want 0", got.Queued)
	}
}

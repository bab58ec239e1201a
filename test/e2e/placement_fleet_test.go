package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
)

// The placement acceptance of issue 39 on a stack of its own (make
// acceptance): wharf with one 4-GPU node, dock with two 8-GPU H100 nodes,
// pier with none. crucible's view shows 4 and 16 free and pier none; twenty
// one-GPU pods submitted at once with cluster "auto" all run at once — 4 on
// wharf, 16 on dock, none ever waiting Unschedulable (each placement counts
// against its spoke until the spoke's watch shows it); the 21st waits on
// dock, the spoke with the most GPUs for it, its decision naming every
// spoke's reason; with placement strict it is refused with 409. Before
// that, another tenant's pods filling dock's GPUs count in the view, and a
// 4-GPU pod goes where it fits.
func TestPlacementFillsTheFleetsGPUs(t *testing.T) {
	t.Parallel()
	spokes := []devstack.SpokeOptions{{Name: "wharf"}, {Name: "dock"}, {Name: "pier"}}
	devstack.WithGPUNodes(spokes, []devstack.GPUPool{
		{Spoke: "wharf", Nodes: 1, GPUs: 4, Product: devstack.DefaultGPUProduct},
		{Spoke: "dock", Nodes: 2, GPUs: 8, Product: "NVIDIA-H100-80GB-HBM3"},
	})
	s := ownStack(t, devstack.Options{Crucible: devstacktest.BuildCrucible, Spokes: spokes})
	for cluster, want := range map[string]string{"wharf": "[{NVIDIA-A100-SXM4-80GB 4 4}]", "dock": "[{NVIDIA-H100-80GB-HBM3 16 16}]", "pier": "[]"} {
		c := capacityOf(t, s, cluster, "synced", 2*time.Minute, func(apiv1.ClusterCapacity) bool { return true })
		if got := fmt.Sprint(c.GPUs); got != want {
			t.Errorf("%s's GPUs %s, want %s", cluster, got, want)
		}
	}

	// Another tenant's pods, not crucible's, fill dock's 16 GPUs: the view
	// counts them, and a 4-GPU auto pod goes to wharf, where it fits, not
	// to the spoke with the most GPUs.
	tenant := s.Spoke("dock").Client.CoreV1().Pods(metav1.NamespaceDefault)
	for i := range 2 {
		if _, err := tenant.Create(t.Context(), tenantGPUPod(fmt.Sprintf("tenant-%d", i), 8), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	capacityOf(t, s, "dock", "the tenant's pods counted", time.Minute, func(c apiv1.ClusterCapacity) bool { free, _ := gpusFree(c); return free == 0 })
	four := submit(t, s, apiv1.SubmitRequest{Cluster: apiv1.ClusterAuto, Image: "busybox", Command: sleeps("1h"), Class: "gpu", GPUs: new(4)})
	if four.Cluster != "wharf" || four.Placement == nil || four.Placement.Waits {
		t.Errorf("a 4-GPU auto pod beside the tenant's: placed on %s with %+v, want wharf, fitting", four.Cluster, four.Placement)
	}
	cancelPodQuietly(s, four.ID)
	for i := range 2 {
		if err := tenant.Delete(t.Context(), fmt.Sprintf("tenant-%d", i), metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
	}
	capacityOf(t, s, "dock", "the tenant's GPUs free", time.Minute, func(c apiv1.ClusterCapacity) bool { free, _ := gpusFree(c); return free == 16 })
	capacityOf(t, s, "wharf", "the 4-GPU pod's GPUs free", time.Minute, func(c apiv1.ClusterCapacity) bool { free, _ := gpusFree(c); return free == 4 })

	ids := submitAtOnce(t, s, 20, apiv1.SubmitRequest{Cluster: apiv1.ClusterAuto, Image: "busybox", Command: sleeps("1h"), Class: "gpu"})
	t.Cleanup(func() {
		for _, id := range ids {
			cancelPodQuietly(s, id)
		}
	})
	on := map[string]int{}
	for _, id := range ids {
		waitRunning(t, s, id)
		wp := getPod(t, s, id)
		on[wp.Cluster]++
		for _, h := range wp.History {
			if h.Reason == "Unschedulable" {
				t.Errorf("%s on %s waited Unschedulable at %s: %s", id, wp.Cluster, h.At, h.Message)
			}
		}
	}
	if on["wharf"] != 4 || on["dock"] != 16 || len(on) != 2 {
		t.Errorf("the twenty ran %v, want 4 on wharf and 16 on dock", on)
	}

	next := apiv1.SubmitRequest{Cluster: apiv1.ClusterAuto, Placement: apiv1.PlacementStrict, Image: "busybox", Command: sleeps("1h"), Class: "gpu"}
	if code, body := apiCall(t, s, http.MethodPost, "/api/pods", next); code != http.StatusConflict || !strings.Contains(string(body), "no cluster fits the pod now") {
		t.Errorf("the 21st, strict: %d %s, want 409", code, body)
	}
	next.Placement = ""
	wp := submit(t, s, next)
	ids = append(ids, wp.ID)
	want := `wharf: 0/2 nodes fit: 1 didn't match node selector/affinity, 1 too little nvidia.com/gpu (most free 0 of 4, needs 1); ` +
		`dock: 0/3 nodes fit: 2 too little nvidia.com/gpu (most free 0 of 8, needs 1), 1 didn't match node selector/affinity; ` +
		`pier: class "gpu" is not offered on cluster "pier"`
	if wp.Cluster != "dock" || wp.Placement == nil || !wp.Placement.Waits || wp.Placement.Decision != want {
		t.Errorf("the 21st placed on %s with %+v; want waiting on dock with %q", wp.Cluster, wp.Placement, want)
	}
}

// tenantGPUPod is another tenant's pod on a GPU node: not crucible's, but
// the capacity view must count it.
func tenantGPUPod(name string, gpus int64) *corev1.Pod {
	q := *resource.NewQuantity(gpus, resource.DecimalSI)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			Containers:  []corev1.Container{{Name: "train", Image: "busybox", Command: sleeps("1h"), Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{devstack.ResourceGPU: q}}}},
			Tolerations: []corev1.Toleration{{Key: devstack.GPUTaint.Key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		},
	}
}

// submitAtOnce submits n copies of req concurrently and returns their ids.
func submitAtOnce(t *testing.T, s *devstack.Stack, n int, req apiv1.SubmitRequest) []string {
	t.Helper()
	ids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			code, _, body, err := apiRequest(t.Context(), s, http.MethodPost, "/api/pods", req, nil)
			var wp apiv1.WorkPod
			switch {
			case err != nil:
				errs[i] = err
			case code != http.StatusCreated:
				errs[i] = fmt.Errorf("%d %s", code, body)
			default:
				errs[i] = json.Unmarshal(body, &wp)
				ids[i] = wp.ID
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("submit %d of %d: %v", i+1, n, err)
		}
	}
	return ids
}

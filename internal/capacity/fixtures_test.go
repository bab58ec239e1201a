package capacity

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
)

// gpuTaint is the dev stack's (and GKE's) GPU node taint.
var gpuTaint = corev1.Taint{Key: string(ResourceGPU), Value: "present", Effect: corev1.TaintEffectNoSchedule}

// gpuToleration tolerates gpuTaint, as a GPU class's pods do.
var gpuToleration = corev1.Toleration{Key: string(ResourceGPU), Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}

// testView is a synced view fed by hand: a pure-decision fixture, no watch.
func testView(t testing.TB, nodes []*corev1.Node, pods ...*corev1.Pod) (*View, *clocktesting.FakeClock) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 4, 20, 0, 0, 0, time.UTC))
	v := New(fake.NewClientset(), Options{Cluster: "test", Clock: clk})
	v.hasSynced = func() bool { return true }
	for _, n := range nodes {
		addNode(t, v, n)
	}
	for _, p := range pods {
		addPod(t, v, p)
	}
	return v, clk
}

// addNode feeds v a node as its watch would: transformed, then handled.
func addNode(t testing.TB, v *View, n *corev1.Node) {
	t.Helper()
	obj, err := slimNode(n)
	if err != nil {
		t.Fatal(err)
	}
	v.onNode(obj, false)
}

// addPod feeds v a pod as its watch would: transformed, stored, handled.
func addPod(t testing.TB, v *View, p *corev1.Pod) {
	t.Helper()
	obj, err := transformPod(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.podStore.Add(obj); err != nil {
		t.Fatal(err)
	}
	v.onPod(nil, obj)
}

// updatePod feeds v a changed pod.
func updatePod(t testing.TB, v *View, p *corev1.Pod) {
	t.Helper()
	obj, _ := transformPod(p)
	old, ok, err := v.podStore.Get(obj)
	if err != nil || !ok {
		t.Fatalf("update of pod %s/%s not in the store (%v)", p.Namespace, p.Name, err)
	}
	if err := v.podStore.Update(obj); err != nil {
		t.Fatal(err)
	}
	v.onPod(old, obj)
}

// deletePod feeds v a pod's deletion.
func deletePod(t testing.TB, v *View, p *corev1.Pod) {
	t.Helper()
	obj, _ := transformPod(p)
	old, ok, err := v.podStore.Get(obj)
	if err != nil || !ok {
		t.Fatalf("delete of pod %s/%s not in the store (%v)", p.Namespace, p.Name, err)
	}
	if err := v.podStore.Delete(old); err != nil {
		t.Fatal(err)
	}
	v.onPod(old, nil)
}

// nodeOpt changes a node under construction.
type nodeOpt func(*corev1.Node)

// cpuNode is a Ready node with cpus CPUs, 64Gi and room for 110 pods.
func cpuNode(name string, cpus int64, opts ...nodeOpt) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}},
		Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{
				corev1.ResourceCPU:    *resource.NewQuantity(cpus, resource.DecimalSI),
				corev1.ResourceMemory: resource.MustParse("64Gi"),
				corev1.ResourcePods:   resource.MustParse("110"),
			},
			Conditions: []corev1.NodeCondition{
				{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse},
				{Type: corev1.NodeReady, Status: corev1.ConditionTrue},
			},
		},
	}
	for _, o := range opts {
		o(n)
	}
	return n
}

// gpuNode is a Ready, GPU-tainted node of 32 CPUs and gpus GPUs of product.
func gpuNode(name string, gpus int64, product string, opts ...nodeOpt) *corev1.Node {
	n := cpuNode(name, 32)
	n.Status.Allocatable[ResourceGPU] = *resource.NewQuantity(gpus, resource.DecimalSI)
	n.Spec.Taints = []corev1.Taint{gpuTaint}
	if product != "" {
		n.Labels[LabelGPUProduct] = product
	}
	for _, o := range opts {
		o(n)
	}
	return n
}

func notReady(n *corev1.Node) { n.Status.Conditions[1].Status = corev1.ConditionFalse }
func cordoned(n *corev1.Node) { n.Spec.Unschedulable = true }
func maxPods(p int64) nodeOpt {
	return func(n *corev1.Node) {
		n.Status.Allocatable[corev1.ResourcePods] = *resource.NewQuantity(p, resource.DecimalSI)
	}
}
func label(k, val string) nodeOpt { return func(n *corev1.Node) { n.Labels[k] = val } }
func taint(t corev1.Taint) nodeOpt {
	return func(n *corev1.Node) { n.Spec.Taints = append(n.Spec.Taints, t) }
}

// podOpt changes a pod under construction.
type podOpt func(*corev1.Pod)

// pod is a pod of one container requesting reqs ("cpu", "2", "nvidia.com/gpu", "1", …).
func pod(name string, reqs ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "work", Name: name},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{Requests: list(reqs...)}}}},
	}
}

// gpuPod is a pod asking for gpus GPUs, tolerating the GPU taint.
func gpuPod(name string, gpus int, opts ...podOpt) *corev1.Pod {
	p := pod(name, "cpu", "1", string(ResourceGPU), resource.NewQuantity(int64(gpus), resource.DecimalSI).String())
	p.Spec.Tolerations = []corev1.Toleration{gpuToleration}
	for _, o := range opts {
		o(p)
	}
	return p
}

// on binds a pod to node.
func on(node string) podOpt { return func(p *corev1.Pod) { p.Spec.NodeName = node } }

// bound is p bound to node.
func bound(p *corev1.Pod, node string) *corev1.Pod {
	p = p.DeepCopy()
	p.Spec.NodeName = node
	return p
}

func list(kv ...string) corev1.ResourceList {
	l := corev1.ResourceList{}
	for i := 0; i+1 < len(kv); i += 2 {
		l[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return l
}

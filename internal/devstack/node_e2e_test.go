package devstack_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
)

// The spoke's nodes re-post their status as a kubelet does: a Ready node
// whose addresses something removed has them back within its heartbeat
// (10–15 s), and its pods' logs — which the API server fetches through the
// node's address — are served again. A CI run once found a spoke's node
// Ready with no addresses for the rest of the run, every pod log failing.
func TestNodeAddressesComeBack(t *testing.T) {
	s := devstacktest.Shared(t)
	spoke := s.Spoke(devstack.DefaultSpokeName)
	nodes := spoke.Client.CoreV1().Nodes()
	before := map[string][]corev1.NodeAddress{}
	for _, spec := range spoke.Nodes {
		n, err := nodes.Get(t.Context(), spec.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}) {
			t.Fatalf("node %s has addresses %v, want its InternalIP 127.0.0.1 (kwok's --node-ip)", spec.Name, n.Status.Addresses)
		}
		before[spec.Name] = n.Status.Addresses
	}
	t.Cleanup(func() { // the shared stack's nodes as they were, whatever happened here
		ctx := context.WithoutCancel(t.Context())
		for name, addrs := range before {
			if n, err := nodes.Get(ctx, name, metav1.GetOptions{}); err == nil && len(n.Status.Addresses) == 0 {
				n.Status.Addresses = addrs
				_, _ = nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{})
			}
		}
	})
	for name := range before {
		cleared, err := nodes.Patch(t.Context(), name, types.MergePatchType, []byte(`{"status":{"addresses":null}}`), metav1.PatchOptions{}, "status")
		if err != nil {
			t.Fatal(err)
		}
		if len(cleared.Status.Addresses) != 0 {
			t.Fatalf("node %s has addresses %v after clearing them: the test proves nothing", name, cleared.Status.Addresses)
		}
	}
	for name, want := range before {
		var got []corev1.NodeAddress
		err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			n, err := nodes.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			got = n.Status.Addresses
			return slices.Equal(got, want), nil
		})
		if err != nil {
			t.Fatalf("node %s's addresses are %v two minutes after they were removed, want them back: %v", name, got, want)
		}
	}
	for i, spec := range spoke.Nodes {
		name := "after-addresses-" + string(rune('a'+i))
		pod := onNode(testPod(name, "echo", "served"), spec)
		createPod(t, spoke, pod)
		done := waitPod(t, spoke.Client, name, finished)
		if done.Spec.NodeName != spec.Name {
			t.Errorf("pod %s ran on %q, want %s", name, done.Spec.NodeName, spec.Name)
		}
		if log := podLog(t, spoke, name); log != "served\n" {
			t.Errorf("log of %s on %s = %q, want %q", name, spec.Name, log, "served\n")
		}
	}
}

// onNode pins pod to node n through the scheduler: a hostname selector and
// a toleration of each of the node's taints.
func onNode(pod *corev1.Pod, n devstack.NodeSpec) *corev1.Pod {
	pod.Spec.NodeSelector = map[string]string{corev1.LabelHostname: n.Name}
	for _, t := range n.Taints {
		pod.Spec.Tolerations = append(pod.Spec.Tolerations, corev1.Toleration{Key: t.Key, Operator: corev1.TolerationOpExists, Effect: t.Effect})
	}
	return pod
}

// Every spoke advertises capacity as a real node does, and kwok's
// heartbeats keep it: wharf has a CPU node and a tainted GPU node labelled
// as GPU feature discovery labels one, dock a CPU node only.
func TestNodesAdvertiseCapacity(t *testing.T) {
	s := devstacktest.Shared(t)
	want := map[string][]string{
		"wharf": {devstack.NodeName, devstack.GPUNodeName},
		"dock":  {devstack.NodeName},
	}
	for name, nodes := range want {
		list, err := s.Spoke(name).Client.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, n := range list.Items {
			got = append(got, n.Name)
		}
		if diff := cmp.Diff(nodes, got); diff != "" {
			t.Errorf("%s's nodes (-want +got):\n%s", name, diff)
		}
	}
	wharf := s.Spoke("wharf")
	gpu := heartbeatNode(t, wharf, devstack.GPUNodeName)
	wantGPU := map[string]string{"cpu": "32", "memory": "256Gi", "pods": "1k", "ephemeral-storage": "200Gi", "nvidia.com/gpu": "4"}
	if diff := cmp.Diff(wantGPU, quantities(gpu.Status.Capacity)); diff != "" {
		t.Errorf("GPU node capacity after a heartbeat (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantGPU, quantities(gpu.Status.Allocatable)); diff != "" {
		t.Errorf("GPU node allocatable after a heartbeat (-want +got):\n%s", diff)
	}
	if !slices.ContainsFunc(gpu.Spec.Taints, func(taint corev1.Taint) bool { return taint.MatchTaint(&devstack.GPUTaint) && taint.Value == "present" }) {
		t.Errorf("GPU node taints %v, want nvidia.com/gpu=present:NoSchedule", gpu.Spec.Taints)
	}
	for k, v := range map[string]string{
		"nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": "4", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
		"nvidia.com/gpu.memory": "81920", corev1.LabelHostname: devstack.GPUNodeName, "type": "kwok",
	} {
		if gpu.Labels[k] != v {
			t.Errorf("GPU node label %s = %q, want %q", k, gpu.Labels[k], v)
		}
	}
	cpu := heartbeatNode(t, s.Spoke("dock"), devstack.NodeName)
	wantCPU := map[string]string{"cpu": "64", "memory": "512Gi", "pods": "1k", "ephemeral-storage": "200Gi"}
	if diff := cmp.Diff(wantCPU, quantities(cpu.Status.Allocatable)); diff != "" {
		t.Errorf("dock's CPU node allocatable after a heartbeat (-want +got):\n%s", diff)
	}
	if len(cpu.Spec.Taints) != 0 {
		t.Errorf("dock's CPU node taints %v, want none", cpu.Spec.Taints)
	}
}

// heartbeatNode returns node name of spoke once kwok has re-posted its
// status after this call: what it shows then survived a heartbeat.
func heartbeatNode(t *testing.T, spoke *devstack.Cluster, name string) *corev1.Node {
	t.Helper()
	since := metav1.Now().Rfc3339Copy()
	var node *corev1.Node
	err := wait.PollUntilContextTimeout(t.Context(), time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := spoke.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		node = n
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.LastHeartbeatTime.After(since.Time) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("node %s of %s: no heartbeat within a minute: %v", name, spoke.Name, err)
	}
	return node
}

func quantities(l corev1.ResourceList) map[string]string {
	m := make(map[string]string, len(l))
	for k, q := range l {
		m[string(k)] = q.String()
	}
	return m
}

// gpuPod asks for gpus GPUs and tolerates the GPU taint, as a gpu class's
// pod will.
func gpuPod(name string, gpus int64) *corev1.Pod {
	pod := testPod(name, "sleep", "3600")
	pod.Spec.Tolerations = []corev1.Toleration{{Key: devstack.GPUTaint.Key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	pod.Spec.Containers[0].Resources.Limits = corev1.ResourceList{devstack.ResourceGPU: *resource.NewQuantity(gpus, resource.DecimalSI)}
	return pod
}

// createDeleted creates pod on spoke and deletes it when the test ends, so
// that the shared stack's GPUs are free again.
func createDeleted(t *testing.T, spoke *devstack.Cluster, pod *corev1.Pod) {
	t.Helper()
	createPod(t, spoke, pod)
	t.Cleanup(func() { deletePod(t, spoke, pod.Name) })
}

func deletePod(t *testing.T, spoke *devstack.Cluster, name string) {
	t.Helper()
	pods := spoke.Client.CoreV1().Pods(devstack.SpokeNamespace)
	ctx := context.WithoutCancel(t.Context())
	if err := pods.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return // already gone
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := pods.Get(ctx, name, metav1.GetOptions{})
		return err != nil, nil
	})
	if err != nil {
		t.Errorf("pod %s still there a minute after its deletion", name)
	}
}

func running(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning }

// unschedulable holds once the scheduler has given up on the pod for now;
// its message says why.
func unschedulable(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable
		}
	}
	return false
}

func scheduledMessage(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return c.Message
		}
	}
	return ""
}

// wharf's four GPUs run four 1-GPU pods at once on the GPU node; a fifth
// waits, unschedulable for want of a GPU, and runs when one of the four
// ends; a pod asking for more GPUs than any node has never schedules.
func TestGPUPodsScheduleByGPUs(t *testing.T) {
	s := devstacktest.Shared(t)
	wharf := s.Spoke("wharf")
	for _, name := range []string{"gpu-a", "gpu-b", "gpu-c", "gpu-d"} {
		createDeleted(t, wharf, gpuPod(name, 1))
	}
	for _, name := range []string{"gpu-a", "gpu-b", "gpu-c", "gpu-d"} {
		if p := waitPod(t, wharf.Client, name, running); p.Spec.NodeName != devstack.GPUNodeName {
			t.Errorf("pod %s runs on %q, want %s", name, p.Spec.NodeName, devstack.GPUNodeName)
		}
	}
	createDeleted(t, wharf, gpuPod("gpu-e", 1))
	createDeleted(t, wharf, gpuPod("gpu-five", 5))
	for _, name := range []string{"gpu-e", "gpu-five"} {
		p := waitPod(t, wharf.Client, name, unschedulable)
		if msg := scheduledMessage(p); !strings.Contains(msg, "Insufficient nvidia.com/gpu") || p.Spec.NodeName != "" {
			t.Errorf("pod %s on %q, PodScheduled message %q; want it unbound, saying Insufficient nvidia.com/gpu", name, p.Spec.NodeName, msg)
		}
	}
	deletePod(t, wharf, "gpu-a")
	if p := waitPod(t, wharf.Client, "gpu-e", running); p.Spec.NodeName != devstack.GPUNodeName {
		t.Errorf("pod gpu-e runs on %q, want %s", p.Spec.NodeName, devstack.GPUNodeName)
	}
	p, err := wharf.Client.CoreV1().Pods(devstack.SpokeNamespace).Get(t.Context(), "gpu-five", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.NodeName != "" || !unschedulable(p) {
		t.Errorf("pod gpu-five on %q, conditions %v; want it still unschedulable", p.Spec.NodeName, p.Status.Conditions)
	}
}

// Without the toleration no pod lands on the GPU node: not one that selects
// it by its labels, not one that asks for a GPU.
func TestGPUNodeTaintKeepsOtherPodsOff(t *testing.T) {
	s := devstacktest.Shared(t)
	wharf := s.Spoke("wharf")
	selecting := testPod("gpu-selector-untolerated", "echo", "no")
	selecting.Spec.NodeSelector = map[string]string{"nvidia.com/gpu.present": "true"}
	asking := gpuPod("gpu-untolerated", 1)
	asking.Spec.Tolerations = nil
	for _, pod := range []*corev1.Pod{selecting, asking} {
		createDeleted(t, wharf, pod)
		p := waitPod(t, wharf.Client, pod.Name, unschedulable)
		if msg := scheduledMessage(p); !strings.Contains(msg, "untolerated taint") || p.Spec.NodeName != "" {
			t.Errorf("pod %s on %q, PodScheduled message %q; want it unbound for the GPU node's untolerated taint", pod.Name, p.Spec.NodeName, msg)
		}
	}
}

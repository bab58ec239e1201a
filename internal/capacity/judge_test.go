package capacity

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

const (
	a100 = "NVIDIA-A100-SXM4-80GB"
	h100 = "NVIDIA-H100-80GB-HBM3"
	gi   = int64(1) << 30
)

func TestJudge(t *testing.T) {
	teamTaint := corev1.Taint{Key: "dedicated", Value: "team-x", Effect: corev1.TaintEffectNoSchedule}
	cases := []struct {
		name  string
		nodes []*corev1.Node
		pods  []*corev1.Pod // on the spoke already
		pod   *corev1.Pod
		want  Verdict
	}{
		{
			name:  "GPU pod fits the GPU node",
			nodes: []*corev1.Node{cpuNode("cpu-0", 64), gpuNode("gpu-0", 4, a100)},
			pod:   gpuPod("p", 2),
			want:  Verdict{Fits: true, Resource: ResourceGPU, Free: 4, Total: 4},
		},
		{
			name:  "too few GPUs on the one node",
			nodes: []*corev1.Node{gpuNode("gpu-0", 4, a100)},
			pods:  []*corev1.Pod{gpuPod("busy", 3, on("gpu-0"))},
			pod:   gpuPod("p", 2),
			want:  Verdict{Reason: "1 of 4 nvidia.com/gpu free (needs 2)", Resource: ResourceGPU, Total: 4},
		},
		{
			name:  "several nodes, counted by reason",
			nodes: []*corev1.Node{cpuNode("cpu-0", 64), gpuNode("gpu-a", 8, h100, taint(teamTaint)), gpuNode("gpu-b", 8, h100)},
			pods:  []*corev1.Pod{gpuPod("busy", 7, on("gpu-b"))},
			pod:   gpuPod("p", 2),
			want: Verdict{Reason: "0/3 nodes fit: 2 too little nvidia.com/gpu (most free 1 of 8, needs 2), 1 had untolerated taint {dedicated=team-x:NoSchedule}",
				Resource: ResourceGPU, Total: 8},
		},
		{
			name:  "node selector mismatch",
			nodes: []*corev1.Node{gpuNode("gpu-0", 4, a100)},
			pod:   gpuPod("p", 1, func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{LabelGPUProduct: h100} }),
			want:  Verdict{Reason: "didn't match node selector/affinity", Resource: ResourceGPU},
		},
		{
			name:  "required node affinity picks the H100 node",
			nodes: []*corev1.Node{gpuNode("gpu-a", 4, a100), gpuNode("gpu-h", 8, h100)},
			pod:   gpuPod("p", 1, requireProduct(h100)),
			want:  Verdict{Fits: true, Resource: ResourceGPU, Free: 8, Total: 8},
		},
		{
			name:  "required node affinity matches nothing",
			nodes: []*corev1.Node{gpuNode("gpu-a", 4, a100), cpuNode("cpu-0", 64)},
			pod:   gpuPod("p", 1, requireProduct(h100)),
			want:  Verdict{Reason: "0/2 nodes fit: 2 didn't match node selector/affinity", Resource: ResourceGPU},
		},
		{
			name:  "untolerated taint",
			nodes: []*corev1.Node{gpuNode("gpu-0", 4, a100)},
			pod:   pod("p", "cpu", "1"),
			want:  Verdict{Reason: "untolerated taint {nvidia.com/gpu=present:NoSchedule}", Resource: corev1.ResourceCPU},
		},
		{
			name:  "tolerated taint",
			nodes: []*corev1.Node{gpuNode("gpu-0", 4, a100)},
			pod:   tolerating(pod("p", "cpu", "1"), gpuToleration),
			want:  Verdict{Fits: true, Resource: corev1.ResourceCPU, Free: 32000, Total: 32000},
		},
		{
			name:  "NoExecute taint keeps the pod off; PreferNoSchedule does not",
			nodes: []*corev1.Node{cpuNode("a", 4, taint(corev1.Taint{Key: "k", Effect: corev1.TaintEffectNoExecute})), cpuNode("b", 8, taint(corev1.Taint{Key: "k", Effect: corev1.TaintEffectPreferNoSchedule}))},
			pod:   pod("p", "cpu", "1"),
			want:  Verdict{Fits: true, Resource: corev1.ResourceCPU, Free: 8000, Total: 8000},
		},
		{
			name: "one taint on two nodes is one reason, whenever each was added",
			nodes: []*corev1.Node{
				cpuNode("cpu-0", 8, taint(corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute, TimeAdded: &metav1.Time{Time: time.Unix(1, 0)}})),
				cpuNode("cpu-1", 8, taint(corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute, TimeAdded: &metav1.Time{Time: time.Unix(2, 0)}})),
			},
			pod:  pod("p", "cpu", "1"),
			want: Verdict{Reason: "0/2 nodes fit: 2 had untolerated taint {node.kubernetes.io/unreachable:NoExecute}", Resource: corev1.ResourceCPU},
		},
		{
			name:  "cordoned",
			nodes: []*corev1.Node{cpuNode("cpu-0", 64, cordoned)},
			pod:   pod("p", "cpu", "1"),
			want:  Verdict{Reason: "cordoned", Resource: corev1.ResourceCPU},
		},
		{
			name:  "cordoned but tolerated, as kube-scheduler's NodeUnschedulable lets it",
			nodes: []*corev1.Node{cpuNode("cpu-0", 64, cordoned)},
			pod:   tolerating(pod("p", "cpu", "1"), corev1.Toleration{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists}),
			want:  Verdict{Fits: true, Resource: corev1.ResourceCPU, Free: 64000, Total: 64000},
		},
		{
			name:  "not Ready",
			nodes: []*corev1.Node{cpuNode("cpu-0", 64, notReady), cpuNode("cpu-1", 64, notReady)},
			pod:   pod("p", "cpu", "1"),
			want:  Verdict{Reason: "0/2 nodes fit: 2 not Ready", Resource: corev1.ResourceCPU},
		},
		{
			name:  "init container and overhead of a bound pod count",
			nodes: []*corev1.Node{cpuNode("cpu-0", 4)},
			pods:  []*corev1.Pod{withInit(overhead(pod("busy", "cpu", "1"), "500m"), "3", false, on("cpu-0"))},
			pod:   pod("p", "cpu", "1"),
			want:  Verdict{Reason: "500m of 4 cpu free (needs 1)", Resource: corev1.ResourceCPU, Total: 4000},
		},
		{
			name:  "sidecar counts beside the main container",
			nodes: []*corev1.Node{cpuNode("cpu-0", 4)},
			pods:  []*corev1.Pod{withInit(pod("busy", "cpu", "1"), "1", true, on("cpu-0"))},
			pod:   pod("p", "cpu", "3"),
			want:  Verdict{Reason: "2 of 4 cpu free (needs 3)", Resource: corev1.ResourceCPU, Total: 4000},
		},
		{
			name:  "the judged pod's init container counts",
			nodes: []*corev1.Node{cpuNode("cpu-0", 4)},
			pod:   withInit(pod("p", "cpu", "1"), "6", false),
			want:  Verdict{Reason: "4 of 4 cpu free (needs 6)", Resource: corev1.ResourceCPU, Total: 4000},
		},
		{
			name:  "pod limit",
			nodes: []*corev1.Node{cpuNode("cpu-0", 64, maxPods(1))},
			pods:  []*corev1.Pod{bound(pod("busy", "cpu", "1"), "cpu-0")},
			pod:   pod("p", "cpu", "1"),
			want:  Verdict{Reason: "0 of 1 pods free (needs 1)", Resource: corev1.ResourceCPU, Total: 64000},
		},
		{
			name:  "memory is scarcer than CPU",
			nodes: []*corev1.Node{cpuNode("cpu-0", 64)},
			pod:   pod("p", "cpu", "1", "memory", "32Gi"),
			want:  Verdict{Fits: true, Resource: corev1.ResourceMemory, Free: 64 * gi, Total: 64 * gi},
		},
		{
			name:  "too little memory on several nodes",
			nodes: []*corev1.Node{cpuNode("cpu-0", 64), cpuNode("cpu-1", 64)},
			pods:  []*corev1.Pod{bound(pod("busy", "memory", "60Gi"), "cpu-1")},
			pod:   pod("p", "memory", "100Gi"),
			want:  Verdict{Reason: "0/2 nodes fit: 2 too little memory (most free 64Gi of 64Gi, needs 100Gi)", Resource: corev1.ResourceMemory, Free: 0, Total: 128 * gi},
		},
		{
			name:  "a pod asking nothing is judged by pod slots",
			nodes: []*corev1.Node{cpuNode("cpu-0", 64)},
			pods:  []*corev1.Pod{bound(pod("busy", "cpu", "1"), "cpu-0")},
			pod:   pod("p"),
			want:  Verdict{Fits: true, Resource: corev1.ResourcePods, Free: 109, Total: 110},
		},
		{
			name:  "another extended resource than GPUs",
			nodes: []*corev1.Node{cpuNode("fpga-0", 8, func(n *corev1.Node) { n.Status.Allocatable["example.com/fpga"] = resource.MustParse("2") })},
			pod:   pod("p", "cpu", "1", "example.com/fpga", "1"),
			want:  Verdict{Fits: true, Resource: "example.com/fpga", Free: 2, Total: 2},
		},
		{
			name: "no nodes",
			pod:  pod("p", "cpu", "1"),
			want: Verdict{Reason: "no nodes", Resource: corev1.ResourceCPU},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v, _ := testView(t, tc.nodes, tc.pods...)
			if diff := cmp.Diff(tc.want, v.Judge(tc.pod)); diff != "" {
				t.Errorf("Judge (-want +got):\n%s", diff)
			}
		})
	}
}

func TestJudgeNotSynced(t *testing.T) {
	v := New(fake.NewClientset(), Options{})
	want := Verdict{Reason: ReasonNotSynced}
	if diff := cmp.Diff(want, v.Judge(gpuPod("p", 1))); diff != "" {
		t.Errorf("Judge of an unsynced view (-want +got):\n%s", diff)
	}
}

// TestJudgeLeavesPodAlone: the API judges the pod it is about to create.
func TestJudgeLeavesPodAlone(t *testing.T) {
	v, _ := testView(t, []*corev1.Node{gpuNode("gpu-0", 4, a100)})
	p := gpuPod("p", 1, requireProduct(a100))
	before := p.DeepCopy()
	v.Judge(p)
	if diff := cmp.Diff(before, p); diff != "" {
		t.Errorf("Judge changed the pod (-before +after):\n%s", diff)
	}
}

func requireProduct(product string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: LabelGPUProduct, Operator: corev1.NodeSelectorOpIn, Values: []string{product}}},
			}}},
		}}
	}
}

func tolerating(p *corev1.Pod, tol corev1.Toleration) *corev1.Pod {
	p.Spec.Tolerations = append(p.Spec.Tolerations, tol)
	return p
}

func overhead(p *corev1.Pod, cpu string) *corev1.Pod {
	p.Spec.Overhead = list("cpu", cpu)
	return p
}

// withInit gives p an init container requesting cpu; sidecar makes it a
// restartable one (restartPolicy Always), which runs beside the main one.
func withInit(p *corev1.Pod, cpu string, sidecar bool, opts ...podOpt) *corev1.Pod {
	c := corev1.Container{Name: "init", Resources: corev1.ResourceRequirements{Requests: list("cpu", cpu)}}
	if sidecar {
		always := corev1.ContainerRestartPolicyAlways
		c.RestartPolicy = &always
	}
	p.Spec.InitContainers = append(p.Spec.InitContainers, c)
	for _, o := range opts {
		o(p)
	}
	return p
}

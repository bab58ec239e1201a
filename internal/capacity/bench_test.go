package capacity

import (
	"fmt"
	"runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// benchView is a spoke of 1,000 nodes — 800 CPU nodes, 200 tainted 8-GPU
// H100 nodes — with 30 bound pods per node.
func benchView(b *testing.B) *View {
	b.Helper()
	v, _ := testView(b, nil)
	for i := range 1000 {
		name := fmt.Sprintf("node-%04d", i)
		n := cpuNode(name, 64, label("topology.kubernetes.io/zone", fmt.Sprintf("zone-%d", i%3)))
		if i%5 == 0 {
			n = gpuNode(name, 8, h100)
		}
		addNode(b, v, n)
		for j := range 30 {
			p := bound(pod(fmt.Sprintf("p-%d-%d", i, j), "cpu", "1", "memory", "1Gi"), name)
			addPod(b, v, p)
		}
		if i%5 == 0 {
			addPod(b, v, gpuPod(fmt.Sprintf("g-%d", i), 7, on(name))) // one GPU left per GPU node
		}
	}
	return v
}

// BenchmarkJudge1000Nodes is one Judge over 1,000 nodes: a 1-GPU pod that
// fits (every node walked once), a 2-GPU pod that fits nowhere (walked
// twice, the Reason built), and a 1-GPU pod with required node affinity.
func BenchmarkJudge1000Nodes(b *testing.B) {
	v := benchView(b)
	for _, bc := range []struct {
		name string
		pod  *corev1.Pod
		fits bool
	}{
		{"fits", gpuPod("p", 1), true},
		{"fits-nowhere", gpuPod("p", 2), false},
		{"affinity", gpuPod("p", 1, requireProduct(h100)), true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if got := v.Judge(bc.pod); got.Fits != bc.fits {
					b.Fatalf("Judge: %+v", got)
				}
			}
		})
	}
}

// BenchmarkViewMemoryPerPod measures what the view keeps per watched pod:
// 100,000 pods, as a watch decodes them (every string its own allocation),
// through the transform into the informer's store and the view's
// accounting; the live heap after a GC against before, with the decoded
// pods gone. Run with -benchtime 1x (memory, not time, is the figure).
func BenchmarkViewMemoryPerPod(b *testing.B) {
	for b.Loop() {
		perPod := viewMemoryPerPod(b)
		b.ReportMetric(perPod*memoryPods/(1<<20), "MiB/100k-pods")
		b.ReportMetric(perPod, "B/pod")
	}
}

// memoryPods is how many pods viewMemoryPerPod feeds a view.
const memoryPods = 100_000

// viewMemoryPerPod is BenchmarkViewMemoryPerPod's measurement, also
// reported by BenchmarkPlacementReport: bytes of live heap per pod.
func viewMemoryPerPod(tb testing.TB) float64 {
	tb.Helper()
	v, _ := testView(tb, nil)
	for i := range 100 {
		addNode(tb, v, cpuNode(fmt.Sprintf("node-%03d", i), 64, maxPods(2000)))
	}
	before := heapInUse()
	for i := range memoryPods {
		addPod(tb, v, decodedPod(i))
	}
	after := heapInUse()
	runtime.KeepAlive(v)
	return float64(after-before) / memoryPods
}

// decodedPod is a bound running pod of 100 nodes' worth as a watch decodes
// it, with what a real pod carries that the view drops: labels, a status,
// an image, a command.
func decodedPod(i int) *corev1.Pod {
	name := fmt.Sprintf("train-%06d", i)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: string([]byte("team-a")), UID: types.UID(fmt.Sprintf("6f1c2d3e-4a5b-4c6d-8e9f-%012d", i)),
			ResourceVersion: fmt.Sprint(1_000_000 + i), Labels: map[string]string{"app": "train", "run": name},
		},
		Spec: corev1.PodSpec{
			NodeName: fmt.Sprintf("node-%03d", i%100),
			Containers: []corev1.Container{{Name: "main", Image: "registry.example/train:1", Command: []string{"python", "train.py"},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("1Gi"),
				}}}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1"},
	}
}

// heapInUse is the live heap after a full collection.
func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// BenchmarkViewMemoryPerNode measures what the view keeps per node: 1,000
// GPU nodes labelled as NVIDIA's feature discovery labels them, with the
// images, addresses and conditions a kubelet reports (which the view
// drops), the live heap after a GC against before. Run with -benchtime 1x.
func BenchmarkViewMemoryPerNode(b *testing.B) {
	for b.Loop() {
		b.ReportMetric(viewMemoryPerNode(b), "B/node")
	}
}

// viewMemoryPerNode is BenchmarkViewMemoryPerNode's measurement, also
// reported by BenchmarkPlacementReport: bytes of live heap per node.
func viewMemoryPerNode(tb testing.TB) float64 {
	tb.Helper()
	const n = 1000
	v, _ := testView(tb, nil)
	before := heapInUse()
	for i := range n {
		addNode(tb, v, decodedNode(i))
	}
	after := heapInUse()
	runtime.KeepAlive(v)
	return float64(after-before) / n
}

// decodedNode is a GPU node as a watch decodes it.
func decodedNode(i int) *corev1.Node {
	name := fmt.Sprintf("gpu-node-%04d", i)
	n := gpuNode(name, 8, h100)
	for _, k := range []string{"nvidia.com/gpu.count", "nvidia.com/gpu.memory", "nvidia.com/gpu.family", "nvidia.com/gpu.compute.major",
		"nvidia.com/gpu.compute.minor", "nvidia.com/cuda.driver.major", "nvidia.com/cuda.runtime.major", "topology.kubernetes.io/zone",
		"node.kubernetes.io/instance-type", "kubernetes.io/os", "kubernetes.io/arch"} {
		n.Labels[k] = fmt.Sprintf("value-%d", i%7)
	}
	for j := range 20 {
		n.Status.Images = append(n.Status.Images, corev1.ContainerImage{Names: []string{fmt.Sprintf("registry.example/image-%d@sha256:%064d", j, i)}, SizeBytes: 1 << 30})
	}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}, {Type: corev1.NodeHostName, Address: name}}
	return n
}

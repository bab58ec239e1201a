package devstack

import (
	"fmt"
	"maps"
	"runtime"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// A spoke's nodes are kwok nodes that advertise capacity, labels and taints as
// real ones do, so that kube-scheduler places pods by resources, taints and
// selectors exactly as on a real spoke. The dev runtime serves all of them on
// the spoke's one kubelet port; it enforces none of their capacity (see
// docs/dev-runtime.md).

// Names of the default nodes. The GPU node's name sorts after the CPU node's,
// so `kubectl get nodes` lists the node untolerated pods land on first.
const (
	NodeName    = "kwok-node-0"
	GPUNodeName = "kwok-node-gpu-0"
)

// ResourceGPU is the extended resource NVIDIA's device plugin advertises.
const ResourceGPU corev1.ResourceName = "nvidia.com/gpu"

// GPUTaint keeps pods that do not tolerate it off a GPU node, as GKE and the
// NVIDIA GPU operator's guides taint GPU nodes.
var GPUTaint = corev1.Taint{Key: string(ResourceGPU), Value: "present", Effect: corev1.TaintEffectNoSchedule}

// NodeSpec is one node of a spoke: what it advertises to kube-scheduler.
type NodeSpec struct {
	// Name is a DNS subdomain, unique within the spoke.
	Name string
	// Capacity is both the node's capacity and its allocatable.
	Capacity corev1.ResourceList
	// Labels are added to the ones every node has: kubernetes.io/hostname,
	// kubernetes.io/os, kubernetes.io/arch and type=kwok.
	Labels map[string]string
	Taints []corev1.Taint
}

// DefaultNodes are the nodes of a spoke whose options name none: every
// spoke has a CPU node; the default spoke, wharf, also has a GPU node with
// four GPUs.
func DefaultNodes(spoke string) []NodeSpec {
	nodes := []NodeSpec{CPUNode(NodeName)}
	if spoke == DefaultSpokeName {
		nodes = append(nodes, GPUNode(GPUNodeName, 4))
	}
	return nodes
}

// CPUNode is a node of 64 CPUs and 512 GiB, a large general-purpose size:
// the benchmarks and the chaos suite keep hundreds of requesting work pods
// of the default class on it at once.
func CPUNode(name string) NodeSpec {
	return NodeSpec{
		Name:     name,
		Capacity: capacity("64", "512Gi"),
		Labels:   map[string]string{corev1.LabelInstanceTypeStable: "kwok-cpu-64"},
	}
}

// GPUNode is a node of 32 CPUs, 256 GiB and gpus NVIDIA A100s, tainted with
// GPUTaint and labelled as NVIDIA's GPU feature discovery labels one.
func GPUNode(name string, gpus int) NodeSpec {
	return ProductGPUNode(name, gpus, DefaultGPUProduct)
}

// ProductGPUNode is GPUNode with gpus of product (nvidia.com/gpu.product).
// Only the A100 gets the labels of its memory, family and compute
// capability: for another product the stack does not know them, and a
// wrong one would mislead a selector more than a missing one.
func ProductGPUNode(name string, gpus int, product string) NodeSpec {
	c := capacity("32", "256Gi")
	c[ResourceGPU] = *resource.NewQuantity(int64(gpus), resource.DecimalSI)
	labels := map[string]string{
		corev1.LabelInstanceTypeStable:    "kwok-gpu-" + strconv.Itoa(gpus) + "x",
		"nvidia.com/gpu.present":          "true",
		"nvidia.com/gpu.count":            strconv.Itoa(gpus),
		"nvidia.com/gpu.product":          product,
		"nvidia.com/gpu.replicas":         "1",
		"nvidia.com/gpu.sharing-strategy": "none",
	}
	if product == DefaultGPUProduct {
		maps.Copy(labels, map[string]string{
			corev1.LabelInstanceTypeStable: "kwok-gpu-" + strconv.Itoa(gpus) + "x-a100",
			"nvidia.com/gpu.memory":        "81920",
			"nvidia.com/gpu.family":        "ampere",
			"nvidia.com/gpu.compute.major": "8",
			"nvidia.com/gpu.compute.minor": "0",
			"nvidia.com/mig.capable":       "true",
		})
	}
	return NodeSpec{Name: name, Capacity: c, Labels: labels, Taints: []corev1.Taint{GPUTaint}}
}

// capacity is what every node has besides its CPUs and memory: a kubelet's
// default pod limit and a disk.
func capacity(cpu, memory string) corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse(cpu),
		corev1.ResourceMemory: resource.MustParse(memory),
		// Not the kubelet's default of 110: the dispatch benchmark keeps 500
		// pods per spoke, and kube-scheduler would queue them on this count
		// alone, measuring the node, not crucible.
		corev1.ResourcePods:             resource.MustParse("1000"),
		corev1.ResourceEphemeralStorage: resource.MustParse("200Gi"),
	}
}

// object is the Node the stack creates. Its status is kept by kwok's
// stages, which fill in only what is missing; the annotation is what kwok
// manages nodes by.
func (n NodeSpec) object() *corev1.Node {
	labels := map[string]string{
		corev1.LabelHostname:   n.Name,
		corev1.LabelOSStable:   "linux",
		corev1.LabelArchStable: runtime.GOARCH,
		"type":                 "kwok",
	}
	maps.Copy(labels, n.Labels)
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        n.Name,
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
			Labels:      labels,
		},
		Spec: corev1.NodeSpec{Taints: n.Taints},
		Status: corev1.NodeStatus{
			Capacity:    n.Capacity.DeepCopy(),
			Allocatable: n.Capacity.DeepCopy(),
			NodeInfo:    corev1.NodeSystemInfo{OperatingSystem: "linux", Architecture: runtime.GOARCH},
		},
	}
}

// validateNodes reports every problem with one spoke's nodes; path is the
// spoke's key path.
func validateNodes(path string, nodes []NodeSpec) []error {
	var errs []error
	seen := map[string]bool{}
	for j, n := range nodes {
		p := fmt.Sprintf("%s.nodes[%d]", path, j)
		for _, msg := range validation.IsDNS1123Subdomain(n.Name) {
			errs = append(errs, fmt.Errorf("%s.name %q: %s", p, n.Name, msg))
		}
		if seen[n.Name] {
			errs = append(errs, fmt.Errorf("%s.name %q: used twice", p, n.Name))
		}
		seen[n.Name] = true
		if pods, ok := n.Capacity[corev1.ResourcePods]; !ok || pods.Sign() <= 0 {
			errs = append(errs, fmt.Errorf("%s.capacity.pods: must be positive, or the node runs nothing", p))
		}
		for k, v := range n.Labels {
			for _, msg := range append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...) {
				errs = append(errs, fmt.Errorf("%s.labels[%s]: %s", p, k, msg))
			}
		}
		for t, taint := range n.Taints {
			for _, msg := range validation.IsQualifiedName(taint.Key) {
				errs = append(errs, fmt.Errorf("%s.taints[%d].key %q: %s", p, t, taint.Key, msg))
			}
			switch taint.Effect {
			case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
			default:
				errs = append(errs, fmt.Errorf("%s.taints[%d].effect %q: not NoSchedule, PreferNoSchedule or NoExecute", p, t, taint.Effect))
			}
		}
	}
	return errs
}

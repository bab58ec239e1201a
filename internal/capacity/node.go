package capacity

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// Names NVIDIA's device plugin and GPU feature discovery give a GPU node.
const (
	// ResourceGPU is the extended resource of NVIDIA GPUs.
	ResourceGPU corev1.ResourceName = "nvidia.com/gpu"
	// LabelGPUProduct names a node's GPU model, e.g. NVIDIA-H100-80GB-HBM3.
	LabelGPUProduct = "nvidia.com/gpu.product"
)

// slimNode is the node informer's transform: of a node it keeps what the
// judgment reads — name and labels (node selector and affinity match
// them), the taints kube-scheduler filters on (NoSchedule, NoExecute),
// spec.unschedulable, allocatable, and the Ready condition — and drops the
// rest (images, addresses, other conditions), which on a GPU node is most
// of it. It is idempotent and turns the node inside a tombstone too.
func slimNode(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Node:
		return newSlimNode(o), nil
	case cache.DeletedFinalStateUnknown:
		if n, ok := o.Obj.(*corev1.Node); ok {
			o.Obj = newSlimNode(n)
		}
		return o, nil
	}
	return obj, nil
}

func newSlimNode(n *corev1.Node) *corev1.Node {
	s := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: n.Labels, ResourceVersion: n.ResourceVersion},
		Spec:       corev1.NodeSpec{Unschedulable: n.Spec.Unschedulable},
		Status:     corev1.NodeStatus{Allocatable: n.Status.Allocatable},
	}
	for _, t := range n.Spec.Taints {
		if t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute {
			s.Spec.Taints = append(s.Spec.Taints, t)
		}
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			s.Status.Conditions = []corev1.NodeCondition{{Type: c.Type, Status: c.Status}}
		}
	}
	return s
}

// nodeState is one node's account: what it offers (from its Node, nil
// until the watch has shown it) and what is taken of it — the requests of
// the pods bound to it and the reservations assigned to it. It exists
// while anything refers to it: pods may show bound to a node before the
// node itself shows.
type nodeState struct {
	name string
	node *corev1.Node // slimNode's; nil while the watch has not shown it

	ready     bool
	alloc     requests
	allocPods int64
	product   string // LabelGPUProduct, "" when absent

	used     requests // bound pods
	pods     int64
	reserved requests // reservations
	nres     int
}

// setNode takes n (nil: the node is gone) as the node's offer.
func (s *nodeState) setNode(n *corev1.Node) {
	s.node = n
	if n == nil {
		s.ready, s.alloc, s.allocPods, s.product = false, requests{}, 0, ""
		return
	}
	s.ready = false
	for _, c := range n.Status.Conditions {
		s.ready = c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
	}
	s.alloc = newRequests(n.Status.Allocatable)
	s.allocPods = s.alloc.get(corev1.ResourcePods)
	s.product = strings.Clone(n.Labels[LabelGPUProduct])
}

// unused reports whether nothing refers to s any more.
func (s *nodeState) unused() bool { return s.node == nil && s.pods == 0 && s.nres == 0 }

// free is how much of name the node has left: allocatable less bound pods'
// requests and reservations. It may be negative (allocatable shrank under
// running pods).
func (s *nodeState) free(name corev1.ResourceName) int64 {
	if name == corev1.ResourcePods {
		return s.allocPods - s.pods - int64(s.nres)
	}
	return s.alloc.get(name) - s.used.get(name) - s.reserved.get(name)
}

// schedulable reports whether the node takes pods at all: Ready and not
// cordoned. Summary counts only these.
func (s *nodeState) schedulable() bool { return s.node != nil && s.ready && !s.node.Spec.Unschedulable }

package capacity

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Summary is a spoke's capacity for display (the API's capacity response,
// `crucible capacity`). It counts the schedulable nodes only — Ready and
// not cordoned — whatever their taints (a taint keeps some pods off a
// node, not all); free is allocatable less the requests of the pods bound
// to the node and the reservations assigned to it, never below zero per
// node.
type Summary struct {
	// Synced: the watches have delivered their first lists; until then
	// every figure is zero.
	Synced bool `json:"synced"`
	// Nodes counts the schedulable nodes; Unavailable the others (not
	// Ready or cordoned), which no figure includes.
	Nodes       int `json:"nodes"`
	Unavailable int `json:"unavailable_nodes"`
	// GPUs is per GPU product (LabelGPUProduct, "" on nodes without the
	// label), by product; nodes without nvidia.com/gpu allocatable are in
	// none. Never nil.
	GPUs []GPUs `json:"gpus"`
	// CPUMillis and MemoryBytes are the spoke's CPU and memory.
	CPUMillis   Amount `json:"cpu_millis"`
	MemoryBytes Amount `json:"memory_bytes"`
}

// GPUs is one product's GPUs on a spoke.
type GPUs struct {
	Product string `json:"product"`
	Nodes   int    `json:"nodes"`
	Free    int64  `json:"free"`
	Total   int64  `json:"total"`
}

// Amount is a resource's free and allocatable amounts.
type Amount struct {
	Free  int64 `json:"free"`
	Total int64 `json:"total"`
}

// Summary is the spoke's capacity now.
func (v *View) Summary() Summary {
	out := Summary{Synced: v.Synced(), GPUs: []GPUs{}}
	if !out.Synced {
		return out // a first list half taken in is no figure
	}
	v.prune()
	v.mu.RLock()
	defer v.mu.RUnlock()
	for _, s := range v.order {
		if !s.schedulable() {
			out.Unavailable++
			continue
		}
		out.Nodes++
		out.CPUMillis.add(s, corev1.ResourceCPU)
		out.MemoryBytes.add(s, corev1.ResourceMemory)
		gpus := s.alloc.get(ResourceGPU)
		if gpus <= 0 {
			continue
		}
		i, found := slices.BinarySearchFunc(out.GPUs, s.product, func(g GPUs, p string) int { return strings.Compare(g.Product, p) })
		if !found {
			out.GPUs = slices.Insert(out.GPUs, i, GPUs{Product: s.product})
		}
		g := &out.GPUs[i]
		g.Nodes++
		g.Total += gpus
		g.Free += max(s.free(ResourceGPU), 0)
	}
	return out
}

func (a *Amount) add(s *nodeState, name corev1.ResourceName) {
	a.Total += s.alloc.get(name)
	a.Free += max(s.free(name), 0)
}

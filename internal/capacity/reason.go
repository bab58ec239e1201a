package capacity

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// failureKind is why one node does not take a pod.
type failureKind int

const (
	fitsEmpty failureKind = iota // no mismatch: it would take the pod if it had room
	kindNotReady
	kindCordoned
	kindTaint
	kindAffinity
)

// failure is why one node would not take a pod even empty; taint is set
// for kindTaint.
type failure struct {
	kind  failureKind
	taint corev1.Taint
}

// group is the nodes that failed for the same reason, and for a resource
// the one of them with the most of it free.
type group struct {
	text        string // "had untolerated taint {…}", "too little nvidia.com/gpu"
	count       int
	resource    corev1.ResourceName
	free, alloc int64
	need        int64
}

// reason is why no node takes the pod: the one node's failure in full, or
// every failure with its count of nodes, most first (then by text), as
// kube-scheduler's "0/3 nodes are available: …" counts them.
func (j *judge) reason(order []*nodeState) string {
	if len(order) == 0 {
		return "no nodes"
	}
	groups := map[string]*group{}
	for _, s := range order {
		g := j.nodeGroup(s)
		if old, ok := groups[g.text]; ok {
			old.count++
			if g.free > old.free || (g.free == old.free && g.alloc > old.alloc) {
				old.free, old.alloc = g.free, g.alloc
			}
			continue
		}
		groups[g.text] = &g
	}
	if len(order) == 1 {
		for _, g := range groups {
			return g.single()
		}
	}
	sorted := make([]*group, 0, len(groups))
	for _, g := range groups {
		sorted = append(sorted, g)
	}
	slices.SortFunc(sorted, func(a, b *group) int {
		return cmp.Or(cmp.Compare(b.count, a.count), strings.Compare(a.text, b.text))
	})
	parts := make([]string, len(sorted))
	for i, g := range sorted {
		parts[i] = strconv.Itoa(g.count) + " " + g.several()
	}
	return fmt.Sprintf("0/%d nodes fit: %s", len(order), strings.Join(parts, ", "))
}

// nodeGroup is node s's failure as a group of one.
func (j *judge) nodeGroup(s *nodeState) group {
	f := j.mismatch(s)
	switch f.kind {
	case kindNotReady:
		return group{text: "not Ready", count: 1}
	case kindCordoned:
		return group{text: "cordoned", count: 1}
	case kindTaint:
		return group{text: "had untolerated taint {" + f.taint.ToString() + "}", count: 1}
	case kindAffinity:
		return group{text: "didn't match node selector/affinity", count: 1}
	}
	i := j.insufficient(s)
	name, need := corev1.ResourcePods, int64(1)
	if i >= 0 {
		name, need = j.names[i], j.need[i]
	}
	return group{text: "too little " + string(name), count: 1, resource: name,
		free: max(s.free(name), 0), alloc: allocatable(s, name), need: need}
}

// single is the group's reason for a spoke of one node.
func (g *group) single() string {
	if g.resource == "" {
		return strings.TrimPrefix(g.text, "had ")
	}
	return fmt.Sprintf("%s of %s %s free (needs %s)", quantity(g.resource, g.free), quantity(g.resource, g.alloc), g.resource, quantity(g.resource, g.need))
}

// several is the group's part of a reason counting nodes.
func (g *group) several() string {
	if g.resource == "" {
		return g.text
	}
	return fmt.Sprintf("%s (most free %s of %s, needs %s)", g.text, quantity(g.resource, g.free), quantity(g.resource, g.alloc), quantity(g.resource, g.need))
}

// quantity is v of resource name as Kubernetes writes it: 500m CPUs,
// 16Gi of memory, 2 GPUs.
func quantity(name corev1.ResourceName, v int64) string {
	switch {
	case name == corev1.ResourceCPU:
		return resource.NewMilliQuantity(v, resource.DecimalSI).String()
	case name == corev1.ResourceMemory || name == corev1.ResourceEphemeralStorage || strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix):
		return resource.NewQuantity(v, resource.BinarySI).String()
	}
	return strconv.FormatInt(v, 10)
}

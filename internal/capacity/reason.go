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
	failure
	count       int
	resource    corev1.ResourceName // kindResource's
	free, alloc int64
	need        int64
}

// kindResource is a group's kind for nodes with too little of a resource
// (or at their pod limit: resource "pods").
const kindResource failureKind = -1

// groupKey is what nodes failing alike share; a struct, not text, so that
// the walk builds no string per node. A taint is its key, value and
// effect: the same taint on two nodes has two times added.
type groupKey struct {
	kind            failureKind
	taintKey, value string
	effect          corev1.TaintEffect
	resource        corev1.ResourceName
}

// reason is why no node takes the pod: the one node's failure in full, or
// every failure with its count of nodes, most first (then by text), as
// kube-scheduler's "0/3 nodes are available: …" counts them.
func (j *judge) reason(order []*nodeState) string {
	if len(order) == 0 {
		return "no nodes"
	}
	groups := map[groupKey]*group{}
	for _, s := range order {
		g := j.nodeGroup(s)
		k := groupKey{kind: g.kind, taintKey: g.taint.Key, value: g.taint.Value, effect: g.taint.Effect, resource: g.resource}
		old, ok := groups[k]
		if !ok {
			first := g // only a new group's copy escapes to the heap
			groups[k] = &first
			continue
		}
		old.count++
		if g.free > old.free || (g.free == old.free && g.alloc > old.alloc) {
			old.free, old.alloc = g.free, g.alloc
		}
	}
	if len(order) == 1 {
		for _, g := range groups {
			return g.single()
		}
	}
	type part struct {
		count int
		text  string
	}
	parts := make([]part, 0, len(groups))
	for _, g := range groups {
		parts = append(parts, part{g.count, g.several()})
	}
	slices.SortFunc(parts, func(a, b part) int { return cmp.Or(cmp.Compare(b.count, a.count), strings.Compare(a.text, b.text)) })
	texts := make([]string, len(parts))
	for i, p := range parts {
		texts[i] = strconv.Itoa(p.count) + " " + p.text
	}
	return fmt.Sprintf("0/%d nodes fit: %s", len(order), strings.Join(texts, ", "))
}

// nodeGroup is node s's failure as a group of one.
func (j *judge) nodeGroup(s *nodeState) group {
	if f := j.mismatch(s); f.kind != fitsEmpty {
		return group{failure: f, count: 1}
	}
	name, need := corev1.ResourcePods, int64(1)
	if i := j.insufficient(s); i >= 0 {
		name, need = j.names[i], j.need[i]
	}
	return group{failure: failure{kind: kindResource}, count: 1, resource: name,
		free: max(s.free(name), 0), alloc: allocatable(s, name), need: need}
}

// several is the group's part of a reason counting nodes.
func (g *group) several() string {
	switch g.kind {
	case kindNotReady:
		return "not Ready"
	case kindCordoned:
		return "cordoned"
	case kindTaint:
		return "had untolerated taint {" + g.taint.ToString() + "}"
	case kindAffinity:
		return "didn't match node selector/affinity"
	}
	return fmt.Sprintf("too little %s (most free %s of %s, needs %s)", g.resource, quantity(g.resource, g.free), quantity(g.resource, g.alloc), quantity(g.resource, g.need))
}

// single is the group's reason for a spoke of one node.
func (g *group) single() string {
	if g.kind != kindResource {
		return strings.TrimPrefix(g.several(), "had ")
	}
	return fmt.Sprintf("%s of %s %s free (needs %s)", quantity(g.resource, g.free), quantity(g.resource, g.alloc), g.resource, quantity(g.resource, g.need))
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

package capacity

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// requests is an amount of each resource, compact: CPU (in millicores) and
// memory in fields, because nearly every pod asks for both and a map or
// slice of them would cost a pod of the view more than its name does; any
// other resource (ephemeral storage, hugepages, extended resources such as
// nvidia.com/gpu) in scalar, sorted by name.
type requests struct {
	milliCPU, memory int64
	scalar           []amount
}

// amount is one resource's quantity: Value(), or MilliValue() for CPU.
type amount struct {
	name corev1.ResourceName
	v    int64
}

// newRequests is list as requests. Zero quantities are dropped: kube-scheduler
// does not check a resource a pod asks none of.
func newRequests(list corev1.ResourceList) requests {
	var r requests
	for name, q := range list {
		switch name {
		case corev1.ResourceCPU:
			r.milliCPU = q.MilliValue()
		case corev1.ResourceMemory:
			r.memory = q.Value()
		default:
			if v := q.Value(); v != 0 {
				r.scalar = append(r.scalar, amount{name: internName(name), v: v})
			}
		}
	}
	slices.SortFunc(r.scalar, func(a, b amount) int { return strings.Compare(string(a.name), string(b.name)) })
	return r
}

// get is r's amount of name.
func (r *requests) get(name corev1.ResourceName) int64 {
	switch name {
	case corev1.ResourceCPU:
		return r.milliCPU
	case corev1.ResourceMemory:
		return r.memory
	}
	for _, a := range r.scalar {
		if a.name == name {
			return a.v
		}
	}
	return 0
}

// add adds sign × o to r (sign is 1 or -1). A scalar that drops to zero
// is removed, so a node's usage does not keep the name of every resource
// a pod once asked for.
func (r *requests) add(o *requests, sign int64) {
	r.milliCPU += sign * o.milliCPU
	r.memory += sign * o.memory
	for _, a := range o.scalar {
		i, found := slices.BinarySearchFunc(r.scalar, a.name, func(e amount, n corev1.ResourceName) int {
			return strings.Compare(string(e.name), string(n))
		})
		switch {
		case !found:
			r.scalar = slices.Insert(r.scalar, i, amount{name: a.name, v: sign * a.v})
		case r.scalar[i].v+sign*a.v == 0:
			r.scalar = slices.Delete(r.scalar, i, i+1)
		default:
			r.scalar[i].v += sign * a.v
		}
	}
}

// names are the resources r asks a positive amount of: CPU, memory, then
// the scalars in order.
func (r *requests) names() []corev1.ResourceName {
	var out []corev1.ResourceName
	if r.milliCPU > 0 {
		out = append(out, corev1.ResourceCPU)
	}
	if r.memory > 0 {
		out = append(out, corev1.ResourceMemory)
	}
	for _, a := range r.scalar {
		if a.v > 0 {
			out = append(out, a.name)
		}
	}
	return out
}

// isExtended reports whether name is an extended resource (a device
// plugin's, such as nvidia.com/gpu): a domain-prefixed name outside
// kubernetes.io, as k8s.io/kubernetes' IsExtendedResourceName judges it
// (that package is not importable).
func isExtended(name corev1.ResourceName) bool {
	s := string(name)
	if !strings.Contains(s, "/") || strings.HasPrefix(s, corev1.ResourceDefaultNamespacePrefix) {
		return false
	}
	return !strings.HasPrefix(s, corev1.DefaultResourceRequestsPrefix)
}

package capacity

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// reservation is a placement in flight: requests counted against the node
// its pod will most likely land on until the watch shows the pod bound
// (its real requests count on its real node from then on), shows it gone,
// or it expires.
type reservation struct {
	node    *nodeState
	req     requests
	expires time.Time
}

// Reserve counts pod, about to be created as namespace/name, against the
// node it would most likely go to — of the nodes that take it now, the one
// with the most free of its scarcest resource (Verdict.Resource), as
// kube-scheduler's default LeastAllocated scoring spreads pods — until the
// watch shows namespace/name bound to a node, shows it deleted (or
// terminated), ttl passes, or Release. Call it before creating the pod:
// Judge then counts the pod from the start, so concurrent placements do
// not all take the same last free GPU. A pod that no node takes now, or
// that the watch shows bound already, reserves nothing. Reserving
// namespace/name again replaces its reservation. ttl must be positive
// (Reserve panics otherwise, as time.NewTicker does: it is a caller's bug).
func (v *View) Reserve(namespace, name string, pod *corev1.Pod, ttl time.Duration) {
	if ttl <= 0 {
		panic(fmt.Sprintf("capacity: Reserve %s/%s with non-positive ttl %s", namespace, name, ttl))
	}
	v.ReserveUntil(namespace, name, pod, v.opts.Clock.Now().Add(ttl))
}

// ReserveUntil is Reserve with the reservation's end given: a placement
// another replica made is counted until its own TTL from its row's
// creation ends, however often it is seen again. An end that has passed
// reserves nothing.
func (v *View) ReserveUntil(namespace, name string, pod *corev1.Pod, expires time.Time) {
	key := podKey(namespace, name)
	now := v.opts.Clock.Now()
	req := newRequests(podRequests(pod))
	v.mu.Lock()
	defer v.mu.Unlock()
	v.pruneLocked(now)
	v.releaseLocked(key)
	if !now.Before(expires) {
		return
	}
	if obj, ok, _ := v.podStore.GetByKey(key); ok {
		if p, isPod := obj.(*cachedPod); isPod && p.nodeName() != "" {
			return
		}
	}
	best := v.judgeLocked(pod, req).best
	if best == nil {
		return
	}
	r := &reservation{node: best, req: req, expires: expires}
	v.reservations[key] = r
	best.reserved.add(&r.req, 1)
	best.nres++
	if v.nextExpiry.IsZero() || r.expires.Before(v.nextExpiry) {
		v.nextExpiry = r.expires
	}
}

// Release ends namespace/name's reservation, if it has one: its create
// failed, or the placement was abandoned.
func (v *View) Release(namespace, name string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.releaseLocked(podKey(namespace, name))
}

func (v *View) releaseLocked(key string) {
	r, ok := v.reservations[key]
	if !ok {
		return
	}
	delete(v.reservations, key)
	r.node.reserved.add(&r.req, -1)
	r.node.nres--
	if r.node.unused() {
		delete(v.state, r.node.name)
	}
}

// pruneLocked drops the reservations expired at now.
func (v *View) pruneLocked(now time.Time) {
	if v.nextExpiry.IsZero() || now.Before(v.nextExpiry) {
		return
	}
	v.nextExpiry = time.Time{}
	for key, r := range v.reservations {
		if !now.Before(r.expires) {
			v.releaseLocked(key)
			continue
		}
		if v.nextExpiry.IsZero() || r.expires.Before(v.nextExpiry) {
			v.nextExpiry = r.expires
		}
	}
}

// prune drops expired reservations before a read: a read needs the write
// lock only when one has expired.
func (v *View) prune() {
	now := v.opts.Clock.Now()
	v.mu.RLock()
	due := !v.nextExpiry.IsZero() && !now.Before(v.nextExpiry)
	v.mu.RUnlock()
	if due {
		v.mu.Lock()
		v.pruneLocked(now)
		v.mu.Unlock()
	}
}

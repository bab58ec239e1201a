package capacity

import (
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/component-helpers/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// Verdict is whether some node of the spoke takes a pod now, and how much
// room there is for it: placement's score (Free) and fallback (Total).
type Verdict struct {
	// Fits: some node takes the pod now.
	Fits bool
	// Reason is why not, kube-scheduler style, "" when Fits: the one
	// node's failure ("1 of 4 nvidia.com/gpu free (needs 2)"), or each
	// failure with its count of nodes ("0/3 nodes fit: 2 had untolerated
	// taint {nvidia.com/gpu=present:NoSchedule}, 1 too little
	// nvidia.com/gpu (most free 1 of 8, needs 2)"), most nodes first.
	Reason string
	// Resource is the pod's scarcest requested resource: nvidia.com/gpu
	// when requested, else another extended resource when requested (the
	// least free of them per unit asked), else the requested resource
	// with the least free per unit asked over the nodes that match the
	// pod; "pods" for a pod that requests nothing.
	Resource corev1.ResourceName
	// Free is how much of Resource is free on the nodes that take the pod
	// now, summed (millicores for cpu, else Value()).
	Free int64
	// Total is Resource's allocatable summed over the nodes that would
	// take the pod if they were empty: Ready, not cordoned (or tolerated),
	// taints tolerated, node selector and required affinity matched.
	Total int64
	// Queued is how much of Resource the spoke's pods no node took yet
	// ask for, summed: the queue a pod that waits there joins.
	Queued int64
}

// ReasonNotSynced is a Verdict's Reason before the view's watches have
// synced: it knows nothing yet, which placement treats like a spoke
// without a view.
const ReasonNotSynced = "capacity not known yet (watch not synced)"

// podRequests is how kube-scheduler's NodeResourcesFit sums a pod it is
// about to place (computePodResourceRequest): init containers, sidecars,
// overhead, pod-level requests.
func podRequests(pod *corev1.Pod) corev1.ResourceList {
	return resource.PodRequests(pod, resource.PodResourcesOptions{})
}

// Judge says whether some node takes pod now, as kube-scheduler would judge
// it: requests (GPUs included) against what is free (allocatable less
// bound pods and reservations), the node's pod limit, node selector and
// required node affinity, taints against tolerations (NoSchedule,
// NoExecute), cordoned nodes unless the pod tolerates
// node.kubernetes.io/unschedulable, and not-Ready nodes. pod is read, never
// changed.
func (v *View) Judge(pod *corev1.Pod) Verdict {
	if !v.Synced() {
		return Verdict{Reason: ReasonNotSynced}
	}
	req := newRequests(podRequests(pod))
	v.prune()
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.judgeLocked(pod, req).verdict
}

// judgment is a Verdict and the node a reservation of the pod goes to.
type judgment struct {
	verdict Verdict
	best    *nodeState // nil unless it fits
}

// judge is one pod's judgment in progress: what it asks, parsed once, and
// per requested resource the sums over the nodes walked so far.
type judge struct {
	pod      *corev1.Pod
	affinity nodeaffinity.RequiredNodeAffinity
	// tolerateCordon: the pod tolerates node.kubernetes.io/unschedulable,
	// so a cordoned node takes it (kube-scheduler's NodeUnschedulable).
	tolerateCordon bool

	names []corev1.ResourceName // requested, positive
	need  []int64
	// Per names[i]: free over matching nodes and over fitting nodes,
	// allocatable over matching nodes, and the fitting node with the most
	// free.
	freeMatch, freeFit, total []int64
	best                      []*nodeState
	fitting                   int
}

// discard is the logger of the taint helpers: a toleration that does not
// match is the judgment, not news.
var discard = logr.Discard()

func newJudge(pod *corev1.Pod, req requests) *judge {
	j := &judge{
		pod:      pod,
		affinity: nodeaffinity.GetRequiredNodeAffinity(pod),
		tolerateCordon: corev1helpers.TolerationsTolerateTaint(discard, pod.Spec.Tolerations,
			&corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}, false),
		names: req.names(),
	}
	for _, n := range j.names {
		j.need = append(j.need, req.get(n))
	}
	if len(j.names) == 0 {
		j.names, j.need = []corev1.ResourceName{corev1.ResourcePods}, []int64{1}
	}
	k := len(j.names)
	j.freeMatch, j.freeFit, j.total = make([]int64, k), make([]int64, k), make([]int64, k)
	j.best = make([]*nodeState, k)
	return j
}

// judgeLocked walks every node once; the Reason, when nothing fits, takes
// a second walk (reason).
func (v *View) judgeLocked(pod *corev1.Pod, req requests) judgment {
	j := newJudge(pod, req)
	for _, s := range v.order {
		if j.mismatch(s).kind != fitsEmpty {
			continue
		}
		fits := j.insufficient(s) == roomy
		if fits {
			j.fitting++
		}
		for i, n := range j.names {
			free := max(s.free(n), 0)
			j.freeMatch[i] += free
			j.total[i] += allocatable(s, n)
			if fits {
				j.freeFit[i] += free
				if j.best[i] == nil || free > j.best[i].free(n) {
					j.best[i] = s
				}
			}
		}
	}
	r := j.scarcest()
	out := judgment{verdict: Verdict{Fits: j.fitting > 0, Resource: j.names[r], Free: j.freeFit[r], Total: j.total[r],
		Queued: max(v.unbound.get(j.names[r]), 0)}}
	if out.verdict.Fits {
		out.best = j.best[r]
	} else {
		out.verdict.Reason = j.reason(v.order)
	}
	return out
}

// allocatable is s's allocatable of name.
func allocatable(s *nodeState, name corev1.ResourceName) int64 {
	if name == corev1.ResourcePods {
		return s.allocPods
	}
	return s.alloc.get(name)
}

// mismatch is why node s would not take the pod even empty (kind
// fitsEmpty when it would): not Ready, cordoned, an untolerated taint,
// selector or affinity, in the order of kube-scheduler's filters. A value,
// not a pointer: the first walk allocates nothing per node.
func (j *judge) mismatch(s *nodeState) failure {
	switch {
	case !s.ready:
		return failure{kind: kindNotReady}
	case s.node.Spec.Unschedulable && !j.tolerateCordon:
		return failure{kind: kindCordoned}
	}
	// The taints are slimNode's, NoSchedule and NoExecute only, so no
	// filter (which would copy them) is needed.
	if taint, untolerated := corev1helpers.FindMatchingUntoleratedTaint(discard, s.node.Spec.Taints, j.pod.Spec.Tolerations, nil, false); untolerated {
		return failure{kind: kindTaint, taint: taint}
	}
	if ok, err := j.affinity.Match(s.node); !ok || err != nil {
		return failure{kind: kindAffinity}
	}
	return failure{}
}

// insufficient is the index in names of the first resource node s has too
// little of for the pod, podLimit for its pod limit, roomy when it takes
// the pod.
func (j *judge) insufficient(s *nodeState) int {
	if s.free(corev1.ResourcePods) < 1 {
		return podLimit
	}
	for i, n := range j.names {
		if s.free(n) < j.need[i] {
			return i
		}
	}
	return roomy
}

// insufficient's answers besides an index.
const (
	roomy    = -1 // the node takes the pod
	podLimit = -2 // the node runs as many pods as it may
)

// scarcest is the index in names of Verdict.Resource.
func (j *judge) scarcest() int {
	extended := false
	for i, n := range j.names {
		if n == ResourceGPU {
			return i
		}
		extended = extended || isExtended(n)
	}
	best := -1
	for i, n := range j.names {
		if extended && !isExtended(n) {
			continue
		}
		// free/need < best's free/need, without dividing.
		if best < 0 || float64(j.freeMatch[i])*float64(j.need[best]) < float64(j.freeMatch[best])*float64(j.need[i]) {
			best = i
		}
	}
	return best
}

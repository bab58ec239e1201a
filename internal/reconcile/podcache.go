package reconcile

import (
	"fmt"
	"strings"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"crucible.dev/crucible/internal/slimmeta"
)

// cachedPod is what a cluster's informer keeps of one work pod: exactly what
// the reconciler's decisions read (decideSync, outcome, transition,
// collectLog, observation) and the informer needs to key and version it. A *corev1.Pod,
// even stripped to these fields, costs ~1.2 KB of struct (its empty PodSpec
// alone is ~600 B) plus a labels map; at 100,000 watched pods that was most
// of the controller's heap. The sweep does not read this cache: it lists
// afresh and decides on full pods.
type cachedPod struct {
	slimmeta.Unkept
	Name, Namespace, ResourceVersion string
	UID                              types.UID
	// DeletionTimestamp is kept so the cache answers meta.Accessor truly
	// about a pod on its way out.
	DeletionTimestamp *metav1.Time
	Phase             corev1.PodPhase
	// Reason and Message are the pod's status reason and message, the
	// outcome of a pod that finished without a terminated container.
	Reason, Message string
	// Terminated is the first terminated container's state (a work pod has
	// one container); nil while none has terminated.
	Terminated *podExit
	// Node is the node the pod is bound to, "" until it is scheduled.
	Node string
	// Pulled: the spoke reported a container's image id, which it has once
	// the image is pulled (a work pod has one container).
	Pulled bool
	// Waiting is why a pending pod does not run, nil when nothing holds it
	// (or it is not pending): a pointer, so that the common pod without a
	// wait costs 8 bytes of it and not two empty strings.
	Waiting *podWaiting
}

// podWaiting is the scheduler's PodScheduled=False or a container's
// waiting state, bounded (maxWaitReason, maxWaitMessage).
type podWaiting struct {
	Reason, Message string
}

// The bounds of what the cache keeps of a wait: a scheduler's message
// names every node's verdict and grows with the cluster, and a spoke is
// not trusted to keep either short.
const (
	maxWaitReason  = 128
	maxWaitMessage = 1 << 10
)

// podExit is a terminated container's verdict.
type podExit struct {
	ExitCode        int32
	Reason, Message string
}

var _ runtime.Object = (*cachedPod)(nil)

// newCachedPod copies of pod what the reconciler reads.
func newCachedPod(pod *corev1.Pod) *cachedPod {
	c := &cachedPod{
		Name: pod.Name, Namespace: pod.Namespace, ResourceVersion: pod.ResourceVersion, UID: pod.UID,
		DeletionTimestamp: pod.DeletionTimestamp,
		Phase:             pod.Status.Phase, Reason: pod.Status.Reason, Message: pod.Status.Message,
	}
	for _, cs := range pod.Status.ContainerStatuses {
		c.Pulled = c.Pulled || cs.ImageID != ""
		if t := cs.State.Terminated; t != nil && c.Terminated == nil {
			c.Terminated = &podExit{ExitCode: t.ExitCode, Reason: t.Reason, Message: t.Message}
		}
	}
	c.Node = pod.Spec.NodeName
	c.Waiting = waitingOf(pod)
	return c
}

// waitingOf is why a pending pod does not run: the scheduler's verdict
// while it is unscheduled, else the first container (init containers
// first) that waits with a reason. A pod that runs or finished waits for
// nothing.
func waitingOf(pod *corev1.Pod) *podWaiting {
	if pod.Status.Phase != corev1.PodPending && pod.Status.Phase != "" {
		return nil
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason != "" {
			return newWaiting(c.Reason, c.Message)
		}
	}
	for _, statuses := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, cs := range statuses {
			if w := cs.State.Waiting; w != nil && w.Reason != "" {
				return newWaiting(w.Reason, w.Message)
			}
		}
	}
	return nil
}

func newWaiting(reason, message string) *podWaiting {
	return &podWaiting{Reason: capText(reason, maxWaitReason), Message: capText(message, maxWaitMessage)}
}

// capText is s cut to at most n bytes on a rune boundary. A cut string is
// copied: a slice of it would keep the whole of s alive in the cache.
func capText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return strings.Clone(s[:n])
}

// cachePod is the informer's transform (slimmeta.PodTransform).
var cachePod = slimmeta.PodTransform(newCachedPod)

// eventPodName is the name of the pod an informer event is about, the
// tombstone of a delete the watch missed included.
func eventPodName(obj any) (string, bool) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	pod, ok := obj.(*cachedPod)
	if !ok {
		return "", false
	}
	return pod.Name, true
}

// podKey is the cache's key of pod name in namespace, as
// cache.MetaNamespaceKeyFunc makes it.
func podKey(namespace, name string) string { return namespace + "/" + name }

// podCache reads one cluster's informer cache by name.
type podCache struct {
	indexer   cache.Indexer
	namespace string
}

// get returns the cached pod called name, nil when the cache has none. An
// object of another type is an error (the transform was bypassed), never
// taken for a missing pod: a missing pod's row may be marked lost.
func (c podCache) get(name string) (*cachedPod, error) {
	obj, ok, err := c.indexer.GetByKey(podKey(c.namespace, name))
	if err != nil || !ok {
		return nil, err
	}
	pod, isPod := obj.(*cachedPod)
	if !isPod {
		return nil, fmt.Errorf("pod cache holds a %T for %s", obj, name)
	}
	return pod, nil
}

// DeepCopyObject implements runtime.Object. Nothing mutates a cached pod,
// but a copy must not share the pointers.
func (p *cachedPod) DeepCopyObject() runtime.Object {
	c := *p
	if p.DeletionTimestamp != nil {
		c.DeletionTimestamp = p.DeletionTimestamp.DeepCopy()
	}
	if p.Terminated != nil {
		t := *p.Terminated
		c.Terminated = &t
	}
	if p.Waiting != nil {
		w := *p.Waiting
		c.Waiting = &w
	}
	return &c
}

// GetObjectKind implements runtime.Object: a cached pod carries no kind.
func (*cachedPod) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

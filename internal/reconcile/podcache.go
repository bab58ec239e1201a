package reconcile

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// cachedPod is what a cluster's informer keeps of one work pod: exactly what
// the reconciler's decisions read (decideSync, outcome, transition,
// collectLog) and the informer needs to key and version it. A *corev1.Pod,
// even stripped to these fields, costs ~1.2 KB of struct (its empty PodSpec
// alone is ~600 B) plus a labels map; at 100,000 watched pods that was most
// of the controller's heap. The sweep does not read this cache: it lists
// afresh and decides on full pods.
type cachedPod struct {
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
}

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
		if t := cs.State.Terminated; t != nil {
			c.Terminated = &podExit{ExitCode: t.ExitCode, Reason: t.Reason, Message: t.Message}
			break
		}
	}
	return c
}

// cachePod is the informer's transform: a pod becomes a *cachedPod before
// anything stores it — in the watch-list's temporary store as in the
// informer's own — so a full pod lives only while its event is decoded. It
// is idempotent (client-go may hand it an object it transformed already) and
// turns the pod inside a tombstone too.
func cachePod(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return newCachedPod(o), nil
	case cache.DeletedFinalStateUnknown:
		if pod, ok := o.Obj.(*corev1.Pod); ok {
			o.Obj = newCachedPod(pod)
		}
		return o, nil
	}
	return obj, nil
}

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
	return &c
}

// GetObjectKind implements runtime.Object: a cached pod carries no kind.
func (*cachedPod) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

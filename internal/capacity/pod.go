package capacity

import (
	"strings"
	"sync"
	"unique"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/component-helpers/resource"

	"crucible.dev/crucible/internal/slimmeta"
)

// cachedPod is what the view keeps of one non-terminal pod: its key, the
// node it is bound to ("" while it waits for kube-scheduler) and its summed
// requests. A *corev1.Pod, even stripped, costs ~1.2 KB of struct; this
// costs a few dozen bytes, and its namespace and node strings are interned
// (one copy per namespace or node, 8 bytes a pod).
type cachedPod struct {
	slimmeta.Unkept
	namespace, node unique.Handle[string]
	name            string
	req             requests
}

var _ runtime.Object = (*cachedPod)(nil)

// podOptions is how kube-scheduler's cache sums a bound pod's requests in
// Kubernetes 1.37 (framework.PodInfo.CalculateResource): resized resources
// from the status (InPlacePodVerticalScaling, GA), pod-level requests
// (PodLevelResources, beta, on).
var podOptions = resource.PodResourcesOptions{
	UseStatusResources: true,
	InPlacePodLevelResourcesVerticalScalingEnabled: true,
}

// newCachedPod is what the view keeps of pod.
func newCachedPod(pod *corev1.Pod) *cachedPod {
	return &cachedPod{
		namespace: unique.Make(pod.Namespace),
		name:      strings.Clone(pod.Name),
		node:      unique.Make(pod.Spec.NodeName),
		req:       newRequests(resource.PodRequests(pod, podOptions)),
	}
}

// transformPod is the pod informer's transform (slimmeta.PodTransform).
var transformPod = slimmeta.PodTransform(newCachedPod)

// resourceNames interns resource names: a spoke's pods ask for a handful
// of resources many times over. A handle is kept, so each name stays one
// copy (unique drops a value nobody holds a handle of).
var resourceNames sync.Map // string → unique.Handle[string]

// internName is n, one copy of it for every pod that asks for it.
func internName(n corev1.ResourceName) corev1.ResourceName {
	if h, ok := resourceNames.Load(string(n)); ok {
		return corev1.ResourceName(h.(unique.Handle[string]).Value())
	}
	h, _ := resourceNames.LoadOrStore(string(n), unique.Make(string(n)))
	return corev1.ResourceName(h.(unique.Handle[string]).Value())
}

// nodeName is the node p is bound to, "" while it is not.
func (p *cachedPod) nodeName() string { return p.node.Value() }

// key is p's key in the informer's store (cache.MetaNamespaceKeyFunc's).
func (p *cachedPod) key() string { return podKey(p.namespace.Value(), p.name) }

// podKey is the store's key of pod name in namespace.
func podKey(namespace, name string) string { return namespace + "/" + name }

// DeepCopyObject implements runtime.Object. Nothing mutates a cached pod.
func (p *cachedPod) DeepCopyObject() runtime.Object {
	c := *p
	c.req.scalar = append([]amount(nil), p.req.scalar...)
	return &c
}

// GetObjectKind implements runtime.Object: a cached pod carries no kind.
func (*cachedPod) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

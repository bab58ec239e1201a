// Package slimmeta lets a slim object an informer caches in place of a full
// one (a pod reduced by the informer's transform to what its cache decides
// on) be a metav1.Object without a metav1.ObjectMeta of ~250 B each.
// client-go's key function and bookkeeping read an object through
// meta.Accessor; what the cache does not keep reads as empty, and nothing
// writes to a cached object.
package slimmeta

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// Unkept is the metav1.Object methods of the fields a slim object does not
// keep: it reads them as empty and drops their writes. Embed it as the
// first field (a zero-size field last would add padding) and define the
// methods of the fields the object keeps: they take precedence.
type Unkept struct{}

func (Unkept) GetNamespace() string                          { return "" }
func (Unkept) SetNamespace(string)                           {}
func (Unkept) GetName() string                               { return "" }
func (Unkept) SetName(string)                                {}
func (Unkept) GetUID() types.UID                             { return "" }
func (Unkept) SetUID(types.UID)                              {}
func (Unkept) GetResourceVersion() string                    { return "" }
func (Unkept) SetResourceVersion(string)                     {}
func (Unkept) GetDeletionTimestamp() *metav1.Time            { return nil }
func (Unkept) SetDeletionTimestamp(*metav1.Time)             {}
func (Unkept) GetGenerateName() string                       { return "" }
func (Unkept) SetGenerateName(string)                        {}
func (Unkept) GetGeneration() int64                          { return 0 }
func (Unkept) SetGeneration(int64)                           {}
func (Unkept) GetSelfLink() string                           { return "" }
func (Unkept) SetSelfLink(string)                            {}
func (Unkept) GetCreationTimestamp() metav1.Time             { return metav1.Time{} }
func (Unkept) SetCreationTimestamp(metav1.Time)              {}
func (Unkept) GetDeletionGracePeriodSeconds() *int64         { return nil }
func (Unkept) SetDeletionGracePeriodSeconds(*int64)          {}
func (Unkept) GetLabels() map[string]string                  { return nil }
func (Unkept) SetLabels(map[string]string)                   {}
func (Unkept) GetAnnotations() map[string]string             { return nil }
func (Unkept) SetAnnotations(map[string]string)              {}
func (Unkept) GetFinalizers() []string                       { return nil }
func (Unkept) SetFinalizers([]string)                        {}
func (Unkept) GetOwnerReferences() []metav1.OwnerReference   { return nil }
func (Unkept) SetOwnerReferences([]metav1.OwnerReference)    {}
func (Unkept) GetManagedFields() []metav1.ManagedFieldsEntry { return nil }
func (Unkept) SetManagedFields([]metav1.ManagedFieldsEntry)  {}

// PodTransform is an informer's transform (cache.TransformFunc) that turns
// a pod into slim(pod) before anything stores it — in the watch-list's
// temporary store as in the informer's own — so a full pod lives only
// while its event is decoded. It is idempotent (client-go may hand it an
// object it transformed already, which passes unchanged) and turns the pod
// inside a tombstone too.
func PodTransform[T any](slim func(*corev1.Pod) T) cache.TransformFunc {
	return func(obj any) (any, error) {
		switch o := obj.(type) {
		case *corev1.Pod:
			return slim(o), nil
		case cache.DeletedFinalStateUnknown:
			if pod, ok := o.Obj.(*corev1.Pod); ok {
				o.Obj = slim(pod)
			}
			return o, nil
		}
		return obj, nil
	}
}

package capacity

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// cachedPod implements metav1.Object itself, so that meta.Accessor (and
// with it the informer's key function) reads it without a
// metav1.ObjectMeta of ~250 B per pod. Only the namespace and name are
// kept; the other fields read as empty and their setters do nothing —
// nothing writes to a cached object. The view's informer hands every
// update to its handler (it is not a shared informer, which would drop an
// update whose resource version reads unchanged), so no version is kept.
var _ metav1.Object = (*cachedPod)(nil)

func (p *cachedPod) GetNamespace() string { return p.namespace.Value() }
func (p *cachedPod) GetName() string      { return p.name }

func (*cachedPod) SetNamespace(string)                           {}
func (*cachedPod) SetName(string)                                {}
func (*cachedPod) GetUID() types.UID                             { return "" }
func (*cachedPod) SetUID(types.UID)                              {}
func (*cachedPod) GetResourceVersion() string                    { return "" }
func (*cachedPod) SetResourceVersion(string)                     {}
func (*cachedPod) GetDeletionTimestamp() *metav1.Time            { return nil }
func (*cachedPod) SetDeletionTimestamp(*metav1.Time)             {}
func (*cachedPod) GetGenerateName() string                       { return "" }
func (*cachedPod) SetGenerateName(string)                        {}
func (*cachedPod) GetGeneration() int64                          { return 0 }
func (*cachedPod) SetGeneration(int64)                           {}
func (*cachedPod) GetSelfLink() string                           { return "" }
func (*cachedPod) SetSelfLink(string)                            {}
func (*cachedPod) GetCreationTimestamp() metav1.Time             { return metav1.Time{} }
func (*cachedPod) SetCreationTimestamp(metav1.Time)              {}
func (*cachedPod) GetDeletionGracePeriodSeconds() *int64         { return nil }
func (*cachedPod) SetDeletionGracePeriodSeconds(*int64)          {}
func (*cachedPod) GetLabels() map[string]string                  { return nil }
func (*cachedPod) SetLabels(map[string]string)                   {}
func (*cachedPod) GetAnnotations() map[string]string             { return nil }
func (*cachedPod) SetAnnotations(map[string]string)              {}
func (*cachedPod) GetFinalizers() []string                       { return nil }
func (*cachedPod) SetFinalizers([]string)                        {}
func (*cachedPod) GetOwnerReferences() []metav1.OwnerReference   { return nil }
func (*cachedPod) SetOwnerReferences([]metav1.OwnerReference)    {}
func (*cachedPod) GetManagedFields() []metav1.ManagedFieldsEntry { return nil }
func (*cachedPod) SetManagedFields([]metav1.ManagedFieldsEntry)  {}

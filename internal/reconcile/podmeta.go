package reconcile

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// cachedPod implements metav1.Object itself, so that meta.Accessor (and with
// it the informer's key function and resource-version bookkeeping) reads it
// without a metav1.ObjectMeta of ~250 B per pod. The fields it keeps are read
// and written; the others read as empty and their setters do nothing —
// nothing writes to a cached object, and no decision reads them.
var _ metav1.Object = (*cachedPod)(nil)

func (p *cachedPod) GetNamespace() string                { return p.Namespace }
func (p *cachedPod) SetNamespace(namespace string)       { p.Namespace = namespace }
func (p *cachedPod) GetName() string                     { return p.Name }
func (p *cachedPod) SetName(name string)                 { p.Name = name }
func (p *cachedPod) GetUID() types.UID                   { return p.UID }
func (p *cachedPod) SetUID(uid types.UID)                { p.UID = uid }
func (p *cachedPod) GetResourceVersion() string          { return p.ResourceVersion }
func (p *cachedPod) SetResourceVersion(version string)   { p.ResourceVersion = version }
func (p *cachedPod) GetDeletionTimestamp() *metav1.Time  { return p.DeletionTimestamp }
func (p *cachedPod) SetDeletionTimestamp(t *metav1.Time) { p.DeletionTimestamp = t }

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

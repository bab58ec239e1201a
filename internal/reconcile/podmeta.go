package reconcile

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// cachedPod is a metav1.Object (slimmeta.Unkept), so that meta.Accessor
// (and with it the informer's key function and resource-version
// bookkeeping) reads it; the fields it keeps are read and written here, and
// no decision reads the others.
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

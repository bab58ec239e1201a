package capacity

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// cachedPod is a metav1.Object (slimmeta.Unkept), so that meta.Accessor
// (and with it the informer's key function) reads it; only the namespace
// and name are kept. The view's informer hands every
// update to its handler (it is not a shared informer, which would drop an
// update whose resource version reads unchanged), so no version is kept.
var _ metav1.Object = (*cachedPod)(nil)

func (p *cachedPod) GetNamespace() string { return p.namespace.Value() }
func (p *cachedPod) GetName() string      { return p.name }

package render

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"crucible.dev/crucible/internal/profile"
)

// Pod Security Admission's namespace labels and the level crucible's loop
// namespaces carry: kube-apiserver's PodSecurity admission (on by default)
// then refuses any pod in the namespace that is not "restricted", whoever
// creates it. Work pods satisfy it by construction (shape.go), so the label
// costs crucible nothing and closes the namespace to a pod made by any other
// means with the controller's pods/create — a privileged container, host
// namespaces, hostPath volumes. Warn and audit say the same, so a kubectl
// user is told and the audit log records it.
const (
	PodSecurityEnforce        = "pod-security.kubernetes.io/enforce"
	PodSecurityEnforceVersion = "pod-security.kubernetes.io/enforce-version"
	PodSecurityWarn           = "pod-security.kubernetes.io/warn"
	PodSecurityWarnVersion    = "pod-security.kubernetes.io/warn-version"
	PodSecurityAudit          = "pod-security.kubernetes.io/audit"
	PodSecurityAuditVersion   = "pod-security.kubernetes.io/audit-version"
	PodSecurityRestricted     = "restricted"
	PodSecurityLatest         = "latest"
)

// LabelPartOf marks the loop namespace as crucible's, as the spoke chart
// does.
const LabelPartOf = "app.kubernetes.io/part-of"

// LoopNamespaceLabels are the labels of every loop namespace: crucible's
// own and Pod Security "restricted" at the latest version, enforced, warned
// and audited. A fresh map each call.
func LoopNamespaceLabels() map[string]string {
	return map[string]string{
		LabelPartOf:               "crucible",
		PodSecurityEnforce:        PodSecurityRestricted,
		PodSecurityEnforceVersion: PodSecurityLatest,
		PodSecurityWarn:           PodSecurityRestricted,
		PodSecurityWarnVersion:    PodSecurityLatest,
		PodSecurityAudit:          PodSecurityRestricted,
		PodSecurityAuditVersion:   PodSecurityLatest,
	}
}

// LoopNamespace is spoke c's loop namespace with LoopNamespaceLabels: the
// first object `crucible render spoke` prints, so that applying its output
// to a fresh spoke creates the namespace the Role lives in, and applying it
// to an existing one adds the labels.
func LoopNamespace(c profile.ClusterEntry) *corev1.Namespace {
	return &corev1.Namespace{
		TypeMeta:   metav1.TypeMeta{APIVersion: corev1.SchemeGroupVersion.String(), Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: c.LoopNamespace, Labels: LoopNamespaceLabels()},
	}
}

package render

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestHubRBAC(t *testing.T) {
	labels := map[string]string{"app.kubernetes.io/managed-by": "crucible"}
	tm := func(kind string) metav1.TypeMeta {
		return metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: kind}
	}
	read := []rbacv1.PolicyRule{
		{APIGroups: []string{"crucible.dev"}, Resources: []string{"workpods"}, Verbs: []string{"get", "list"}},
		{APIGroups: []string{"crucible.dev"}, Resources: []string{"workpods/log", "workpods/artifacts"}, Verbs: []string{"get"}},
	}
	portForward := rbacv1.PolicyRule{APIGroups: []string{"crucible.dev"}, Resources: []string{"workpods/portforward"}, Verbs: []string{"create"}}
	// Only the admin may port-forward into another submitter's pods.
	portForwardAny := rbacv1.PolicyRule{APIGroups: []string{"crucible.dev"}, Resources: []string{"workpods/portforward"}, Verbs: []string{"create", "create-any"}}
	want := []runtime.Object{
		&rbacv1.ClusterRole{TypeMeta: tm("ClusterRole"), ObjectMeta: metav1.ObjectMeta{Name: "crucible-controller-api-auth", Labels: labels},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
				{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
			}},
		&rbacv1.ClusterRoleBinding{TypeMeta: tm("ClusterRoleBinding"), ObjectMeta: metav1.ObjectMeta{Name: "crucible-controller-api-auth", Labels: labels},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "ops", Name: "ctl"}},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "crucible-controller-api-auth"}},
		&rbacv1.ClusterRole{TypeMeta: tm("ClusterRole"), ObjectMeta: metav1.ObjectMeta{Name: "crucible-controller-discovery", Labels: labels},
			Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/.well-known/openid-configuration", "/openid/v1/jwks"}, Verbs: []string{"get"}}}},
		&rbacv1.ClusterRoleBinding{TypeMeta: tm("ClusterRoleBinding"), ObjectMeta: metav1.ObjectMeta{Name: "crucible-controller-discovery", Labels: labels},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "ops", Name: "ctl"}},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "crucible-controller-discovery"}},
		&rbacv1.Role{TypeMeta: tm("Role"), ObjectMeta: metav1.ObjectMeta{Name: "crucible-controller-leader-election", Namespace: "ops", Labels: labels},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "create", "update", "delete"}}}},
		&rbacv1.RoleBinding{TypeMeta: tm("RoleBinding"), ObjectMeta: metav1.ObjectMeta{Name: "crucible-controller-leader-election", Namespace: "ops", Labels: labels},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "ops", Name: "ctl"}},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "crucible-controller-leader-election"}},
		&rbacv1.ClusterRole{TypeMeta: tm("ClusterRole"), ObjectMeta: metav1.ObjectMeta{Name: "crucible-viewer", Labels: labels}, Rules: read},
		// run-live is the submitter's and the admin's, never the viewer's
		// (a port-forward reaches the pod's own code).
		&rbacv1.ClusterRole{TypeMeta: tm("ClusterRole"), ObjectMeta: metav1.ObjectMeta{Name: "crucible-submitter", Labels: labels},
			Rules: append(append([]rbacv1.PolicyRule{}, read...), rbacv1.PolicyRule{APIGroups: []string{"crucible.dev"}, Resources: []string{"workpods"}, Verbs: []string{"create"}}, portForward)},
		&rbacv1.ClusterRole{TypeMeta: tm("ClusterRole"), ObjectMeta: metav1.ObjectMeta{Name: "crucible-admin", Labels: labels},
			Rules: append(append([]rbacv1.PolicyRule{}, read...), rbacv1.PolicyRule{APIGroups: []string{"crucible.dev"}, Resources: []string{"workpods"}, Verbs: []string{"create", "delete"}}, portForwardAny)},
	}
	got := HubRBAC("ops", "ctl")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("HubRBAC (-want +got):\n%s", diff)
	}
	// The viewer's rules are not shared with the others' (append aliasing).
	if n := len(got[6].(*rbacv1.ClusterRole).Rules); n != 2 {
		t.Errorf("viewer has %d rules, want 2", n)
	}
	out, err := YAML(got...)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(out), "\n---\n"); n != len(got)-1 {
		t.Errorf("YAML has %d separators for %d objects:\n%s", n, len(got), out)
	}
}

// The token-request grant is create on serviceaccounts/token for the
// controller's own account only, in its namespace: it can mint its own
// tokens and nobody else's.
func TestHubTokenRequestRBAC(t *testing.T) {
	labels := map[string]string{"app.kubernetes.io/managed-by": "crucible"}
	tm := func(kind string) metav1.TypeMeta {
		return metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: kind}
	}
	meta := metav1.ObjectMeta{Name: "crucible-controller-token-request", Namespace: "ops", Labels: labels}
	want := []runtime.Object{
		&rbacv1.Role{TypeMeta: tm("Role"), ObjectMeta: meta,
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, ResourceNames: []string{"ctl"}, Verbs: []string{"create"}}}},
		&rbacv1.RoleBinding{TypeMeta: tm("RoleBinding"), ObjectMeta: meta,
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "ops", Name: "ctl"}},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "crucible-controller-token-request"}},
	}
	if diff := cmp.Diff(want, HubTokenRequestRBAC("ops", "ctl")); diff != "" {
		t.Errorf("HubTokenRequestRBAC (-want +got):\n%s", diff)
	}
}

package e2e

import (
	"context"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/render"
)

// Issue 25, point 2, on a real spoke: the RBAC `render spoke --subject
// kueue-system/kueue-controller-manager=multikueue:default` prints, applied
// to wharf, lets the hub's Kueue (the spoke's user hub:system:serviceaccount:…)
// do exactly MultiKueue's worker-side verbs in default, and nothing the
// spoke grants its own Kueue service account of the same name — which keeps
// its own. Issue 37: nothing of it reaches the loop namespace's pods (no
// create, delete, get or list there, none cluster-wide); cluster-wide it
// may only list and watch the kinds Kueue's watchers list.
// Asked as kube-apiserver's authorizer decides (SubjectAccessReview, what
// kubectl auth can-i --as asks).
func TestFederatedSubjectHasExactlyItsRBAC(t *testing.T) {
	s := sharedStack(t)
	wharf := s.Spoke("wharf")
	grants, err := render.PresetGrants(render.PresetMultiKueue, []string{"default"}, render.PresetScope{LoopNamespace: devstack.SpokeNamespace})
	if err != nil {
		t.Fatal(err)
	}
	const ns, sa = "kueue-system", "kueue-controller-manager"
	f := render.Federation{ControllerSubject: devstack.HubSubject, ControllerUsername: controllerUser, UsernamePrefix: "hub:",
		Subjects: []render.FederatedSubject{{Namespace: ns, ServiceAccount: sa, Grants: grants}}}
	if errs := f.Check(); len(errs) > 0 {
		t.Fatal(errs)
	}
	// The spoke's own Kueue, with a right the hub's must not inherit.
	ensureNamespace(t, wharf, ns)
	if _, err := wharf.Client.CoreV1().ServiceAccounts(ns).Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	own := []runtime.Object{
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "e2e-spoke-kueue"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}}}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "e2e-spoke-kueue"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "e2e-spoke-kueue"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa}}},
	}
	objs := append(f.RBAC(), own...)
	applyRBAC(t, wharf, objs...)
	t.Cleanup(func() { deleteRBAC(wharf, objs...) })

	hubKueue := "hub:" + f.Subjects[0].Subject()
	spokeKueue := f.Subjects[0].Subject()
	for _, tc := range []struct {
		user   string
		groups []string
		attrs  authorizationv1.ResourceAttributes
		want   bool
	}{
		{hubKueue, nil, authorizationv1.ResourceAttributes{Group: "batch", Resource: "jobs", Verb: "create", Namespace: "default"}, true},
		{hubKueue, nil, authorizationv1.ResourceAttributes{Group: "kueue.x-k8s.io", Resource: "workloads", Subresource: "status", Verb: "patch", Namespace: "default"}, true},
		{hubKueue, nil, authorizationv1.ResourceAttributes{Group: "", Resource: "secrets", Verb: "get", Namespace: "default"}, false},
		{hubKueue, nil, authorizationv1.ResourceAttributes{Group: "", Resource: "nodes", Verb: "delete"}, false},
		{hubKueue, nil, authorizationv1.ResourceAttributes{Group: "", Resource: "pods", Verb: "create", Namespace: "default"}, true},
		{hubKueue, nil, authorizationv1.ResourceAttributes{Group: "", Resource: "pods", Verb: "create", Namespace: devstack.SpokeNamespace}, false},
		{hubKueue, nil, authorizationv1.ResourceAttributes{Group: "", Resource: "pods", Verb: "delete", Namespace: devstack.SpokeNamespace}, false},
		{hubKueue, nil, authorizationv1.ResourceAttributes{Group: "", Resource: "pods", Verb: "get", Namespace: devstack.SpokeNamespace}, false},
		{hubKueue, nil, authorizationv1.ResourceAttributes{Group: "", Resource: "pods", Verb: "list"}, false},
		{hubKueue, nil, authorizationv1.ResourceAttributes{Group: "batch", Resource: "jobs", Verb: "create", Namespace: devstack.SpokeNamespace}, false},
		{hubKueue, nil, authorizationv1.ResourceAttributes{Group: "batch", Resource: "jobs", Verb: "watch"}, true},
		{hubKueue, nil, authorizationv1.ResourceAttributes{Group: "kueue.x-k8s.io", Resource: "workloads", Verb: "list"}, true},
		{spokeKueue, []string{"system:serviceaccounts", "system:serviceaccounts:" + ns}, authorizationv1.ResourceAttributes{Group: "", Resource: "secrets", Verb: "get", Namespace: "default"}, true},
		{spokeKueue, []string{"system:serviceaccounts", "system:serviceaccounts:" + ns}, authorizationv1.ResourceAttributes{Group: "batch", Resource: "jobs", Verb: "create", Namespace: "default"}, false},
	} {
		attrs := tc.attrs
		review, err := wharf.Client.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: tc.user, Groups: tc.groups, ResourceAttributes: &attrs}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if review.Status.Allowed != tc.want {
			t.Errorf("%s may %s %s/%s/%s: %v, want %v (%s)", tc.user, attrs.Verb, attrs.Group, attrs.Resource, attrs.Subresource,
				review.Status.Allowed, tc.want, review.Status.Reason)
		}
	}
}

// deleteRBAC deletes what applyRBAC created on c, best effort (a cleanup:
// the test's context is done).
func deleteRBAC(c *devstack.Cluster, objs ...runtime.Object) {
	ctx, rbac := context.Background(), c.Client.RbacV1()
	for _, obj := range objs {
		switch o := obj.(type) {
		case *rbacv1.ClusterRole:
			_ = rbac.ClusterRoles().Delete(ctx, o.Name, metav1.DeleteOptions{})
		case *rbacv1.ClusterRoleBinding:
			_ = rbac.ClusterRoleBindings().Delete(ctx, o.Name, metav1.DeleteOptions{})
		case *rbacv1.Role:
			_ = rbac.Roles(o.Namespace).Delete(ctx, o.Name, metav1.DeleteOptions{})
		case *rbacv1.RoleBinding:
			_ = rbac.RoleBindings(o.Namespace).Delete(ctx, o.Name, metav1.DeleteOptions{})
		}
	}
}

package render

import (
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/workpod"
)

// ControllerRBACName names the Role, ClusterRole and their bindings;
// CapacityRBACName the ClusterRole and binding of a cluster with capacity.
const (
	ControllerRBACName = "crucible-controller"
	CapacityRBACName   = "crucible-controller-capacity"
)

// SpokeRBAC is the controller identity's RBAC on spoke c, exactly R-ID4 and
// nothing more: a Role in the loop namespace (pods get/list/watch/create/
// delete, pods/log get, configmaps and secrets create/delete) and a
// ClusterRole (tokenreviews create, and get on the spoke's OIDC discovery
// documents /.well-known/openid-configuration and /openid/v1/jwks, both for
// the drop-box's review and local pre-check), each bound to the User
// controllerUsername, the name the spoke's authn webhook maps the
// controller's token to. A cluster with run_live adds pods/portforward
// create to the Role, and only then: a port-forward reaches any port of any
// pod in the namespace. A cluster with capacity adds CapacityRBAC, and only
// then. In apply order: Role, RoleBinding, ClusterRole, ClusterRoleBinding
// (then the capacity ClusterRole and its binding).
func SpokeRBAC(c profile.ClusterEntry, controllerUsername string) []runtime.Object {
	labels := map[string]string{workpod.LabelManagedBy: workpod.ManagedByValue}
	subjects := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: controllerUsername}}
	typeMeta := func(kind string) metav1.TypeMeta {
		return metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: kind}
	}
	namespaced := metav1.ObjectMeta{Name: ControllerRBACName, Namespace: c.LoopNamespace, Labels: labels}
	cluster := metav1.ObjectMeta{Name: ControllerRBACName, Labels: labels}
	rules := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "create", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"pods/log"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create", "delete"}},
	}
	if c.RunLive {
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/portforward"}, Verbs: []string{"create"}})
	}
	objs := []runtime.Object{
		&rbacv1.Role{
			TypeMeta:   typeMeta("Role"),
			ObjectMeta: *namespaced.DeepCopy(),
			Rules:      rules,
		},
		&rbacv1.RoleBinding{
			TypeMeta:   typeMeta("RoleBinding"),
			ObjectMeta: *namespaced.DeepCopy(),
			Subjects:   subjects,
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: ControllerRBACName},
		},
		&rbacv1.ClusterRole{
			TypeMeta:   typeMeta("ClusterRole"),
			ObjectMeta: *cluster.DeepCopy(),
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
				{NonResourceURLs: []string{"/.well-known/openid-configuration", "/openid/v1/jwks"}, Verbs: []string{"get"}},
			},
		},
		&rbacv1.ClusterRoleBinding{
			TypeMeta:   typeMeta("ClusterRoleBinding"),
			ObjectMeta: *cluster.DeepCopy(),
			Subjects:   []rbacv1.Subject{subjects[0]},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: ControllerRBACName},
		},
	}
	if c.Capacity {
		objs = append(objs, CapacityRBAC(controllerUsername)...)
	}
	return objs
}

// CapacityRBAC is what a capacity view of a spoke needs (R-PL1): nodes
// get/list/watch and pods list/watch across the whole cluster, since
// another tenant's pods take GPUs too. It is a grant to read every pod's
// spec on the spoke, env values and the names of referenced secrets
// included, so it is rendered only for a cluster with capacity = true. In
// apply order: ClusterRole, ClusterRoleBinding.
func CapacityRBAC(controllerUsername string) []runtime.Object {
	meta := metav1.ObjectMeta{Name: CapacityRBACName, Labels: map[string]string{workpod.LabelManagedBy: workpod.ManagedByValue}}
	return []runtime.Object{
		&rbacv1.ClusterRole{
			TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRole"},
			ObjectMeta: *meta.DeepCopy(),
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
				{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "watch"}},
			},
		},
		&rbacv1.ClusterRoleBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRoleBinding"},
			ObjectMeta: *meta.DeepCopy(),
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: controllerUsername}},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: CapacityRBACName},
		},
	}
}

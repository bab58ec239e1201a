package render

import (
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	cpv1alpha1 "sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"

	"crucible.dev/crucible/internal/apiauth"
	"crucible.dev/crucible/internal/workpod"
)

// The hub ClusterRoles of `crucible render hub`.
const (
	HubAPIAuthName   = "crucible-controller-api-auth"
	HubViewerName    = "crucible-viewer"
	HubSubmitterName = "crucible-submitter"
	HubAdminName     = "crucible-admin"
	HubDiscoveryName = "crucible-controller-discovery"
	HubLeaderName    = "crucible-controller-leader-election"
	// HubTokenRequestName is the Role (and RoleBinding) of
	// HubTokenRequestRBAC.
	HubTokenRequestName = "crucible-controller-token-request"
	authenticationAPI   = "authentication.k8s.io"
	authorizationAPI    = "authorization.k8s.io"
)

// HubRBAC is what the hub needs for the API's auth (R-C12), in apply order:
//
//   - ClusterRole crucible-controller-api-auth (tokenreviews create,
//     subjectaccessreviews create) and its ClusterRoleBinding to the
//     controller's service account namespace/name: api.auth "kubernetes" and
//     "proxy" review every caller on the hub with the controller's identity;
//   - ClusterRole crucible-controller-discovery (get on the hub's two OIDC
//     documents, which the discovery mirror proxies) and its binding: clusters
//     grant this to every service account by default; this makes it explicit;
//   - Role crucible-controller-leader-election (leases get, list, create,
//     update, delete: list and delete for the replicas' member Leases)
//     in namespace, and its binding, for --leader-elect (R-C10);
//   - example ClusterRoles for people, over crucible's own resource
//     workpods.crucible.dev (the cluster is the resource name):
//     crucible-viewer (list and read pods, their logs and artifacts),
//     crucible-submitter (the viewer's rights, submit and run-live into
//     their own pods: a port-forward reaches the code they submitted) and
//     crucible-admin (the submitter's, cancel, and run-live into any
//     submitter's pods: create-any on workpods/portforward). Bind them with a RoleBinding in
//     api.namespace, or a ClusterRoleBinding; copy one with resourceNames to
//     limit it to some clusters.
func HubRBAC(namespace, serviceAccount string) []runtime.Object {
	labels := map[string]string{workpod.LabelManagedBy: workpod.ManagedByValue}
	meta := func(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name, Labels: labels} }
	namespaced := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels}
	}
	typeMeta := func(kind string) metav1.TypeMeta {
		return metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: kind}
	}
	workpods := func(verbs ...string) rbacv1.PolicyRule {
		return rbacv1.PolicyRule{APIGroups: []string{apiauth.Group}, Resources: []string{apiauth.Resource}, Verbs: verbs}
	}
	read := []rbacv1.PolicyRule{
		workpods(apiauth.VerbGet, apiauth.VerbList),
		{APIGroups: []string{apiauth.Group}, Resources: []string{apiauth.Resource + "/" + apiauth.SubresourceLog, apiauth.Resource + "/" + apiauth.SubresourceArtifacts}, Verbs: []string{apiauth.VerbGet}},
	}
	portForward := func(verbs ...string) rbacv1.PolicyRule {
		return rbacv1.PolicyRule{APIGroups: []string{apiauth.Group}, Resources: []string{apiauth.Resource + "/" + apiauth.SubresourcePortForward}, Verbs: verbs}
	}
	role := func(name string, rules ...rbacv1.PolicyRule) *rbacv1.ClusterRole {
		return &rbacv1.ClusterRole{TypeMeta: typeMeta("ClusterRole"), ObjectMeta: meta(name), Rules: rules}
	}
	return []runtime.Object{
		role(HubAPIAuthName,
			rbacv1.PolicyRule{APIGroups: []string{authenticationAPI}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
			rbacv1.PolicyRule{APIGroups: []string{authorizationAPI}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
		),
		&rbacv1.ClusterRoleBinding{
			TypeMeta:   typeMeta("ClusterRoleBinding"),
			ObjectMeta: meta(HubAPIAuthName),
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: serviceAccount}},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: HubAPIAuthName},
		},
		role(HubDiscoveryName, rbacv1.PolicyRule{NonResourceURLs: []string{"/.well-known/openid-configuration", "/openid/v1/jwks"}, Verbs: []string{"get"}}),
		&rbacv1.ClusterRoleBinding{
			TypeMeta:   typeMeta("ClusterRoleBinding"),
			ObjectMeta: meta(HubDiscoveryName),
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: serviceAccount}},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: HubDiscoveryName},
		},
		&rbacv1.Role{
			TypeMeta:   typeMeta("Role"),
			ObjectMeta: namespaced(HubLeaderName),
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "create", "update", "delete"}}},
		},
		&rbacv1.RoleBinding{
			TypeMeta:   typeMeta("RoleBinding"),
			ObjectMeta: namespaced(HubLeaderName),
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: serviceAccount}},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: HubLeaderName},
		},
		role(HubViewerName, read...),
		role(HubSubmitterName, append(read[:2:2], workpods(apiauth.VerbCreate), portForward(apiauth.VerbCreate))...),
		role(HubAdminName, append(read[:2:2], workpods(apiauth.VerbCreate, apiauth.VerbDelete),
			portForward(apiauth.VerbCreate, apiauth.VerbCreateAny))...),
	}
}

// HubTokenRequestRBAC is what spokes with token_source = "request" need on
// the hub: Role crucible-controller-token-request in namespace, create on
// serviceaccounts/token for resourceNames [serviceAccount] only — the
// controller may ask the TokenRequest API for its own tokens and no other
// account's — and its RoleBinding to that account. It is apart from HubRBAC,
// asked for by `render hub --token-request` and the hub chart's
// rbac.tokenRequest, because a controller whose spoke tokens are all
// projected has no use for it, and with it a stolen controller identity can
// mint tokens that outlive the projected ones.
func HubTokenRequestRBAC(namespace, serviceAccount string) []runtime.Object {
	return hubRoleFor(HubTokenRequestName, namespace, namespace, serviceAccount, rbacv1.PolicyRule{
		APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, ResourceNames: []string{serviceAccount}, Verbs: []string{"create"}})
}

// hubRoleFor is Role name in namespace with rules, and its RoleBinding to
// the controller's account (saNamespace/serviceAccount).
func hubRoleFor(name, namespace, saNamespace, serviceAccount string, rules ...rbacv1.PolicyRule) []runtime.Object {
	labels := map[string]string{workpod.LabelManagedBy: workpod.ManagedByValue}
	meta := metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels}
	typeMeta := func(kind string) metav1.TypeMeta {
		return metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: kind}
	}
	return []runtime.Object{
		&rbacv1.Role{TypeMeta: typeMeta("Role"), ObjectMeta: meta, Rules: rules},
		&rbacv1.RoleBinding{
			TypeMeta:   typeMeta("RoleBinding"),
			ObjectMeta: *meta.DeepCopy(),
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: saNamespace, Name: serviceAccount}},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		},
	}
}

// HubClusterProfilesRBACName names the Role (in the ClusterProfiles'
// namespace) that lets the controller read them, and its RoleBinding.
const HubClusterProfilesRBACName = "crucible-controller-cluster-profiles"

// HubClusterProfilesRBAC is what [fleet] cluster_profiles needs on the hub:
// Role crucible-controller-cluster-profiles in profilesNamespace, get, list
// and watch on clusterprofiles.multicluster.x-k8s.io there and nothing
// else, bound to the controller's account in namespace. Reading is all the
// controller does with them; writing them is the cluster manager's, and who
// may do it chooses where spoke tokens go (docs/config.md, [fleet]).
func HubClusterProfilesRBAC(profilesNamespace, namespace, serviceAccount string) []runtime.Object {
	return hubRoleFor(HubClusterProfilesRBACName, profilesNamespace, namespace, serviceAccount, rbacv1.PolicyRule{
		APIGroups: []string{cpv1alpha1.GroupVersion.Group}, Resources: []string{"clusterprofiles"}, Verbs: []string{"get", "list", "watch"}})
}

package render

import (
	"errors"
	"fmt"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"crucible.dev/crucible/internal/workpod"
)

// serviceAccountPrefix starts every service account's subject; hub tokens
// are service-account tokens, so it starts every subject a spoke can trust.
const serviceAccountPrefix = systemPrefix + "serviceaccount:"

// FederatedRBACPrefix starts the names of a federated subject's Role and
// ClusterRole and their bindings: crucible-federated:NS:SA. RBAC names may
// hold colons (Kubernetes' own system:controller:... roles do), and as
// neither a namespace nor a service account name may, no two subjects share
// a name.
const FederatedRBACPrefix = "crucible-federated:"

// FederatedSubject is a hub service account, other than crucible's own
// controller, that a spoke trusts and authorizes: the webhook accepts its
// tokens, and the spoke's RBAC binds Grants to its prefixed user name.
type FederatedSubject struct {
	// Namespace and ServiceAccount name the account on the hub.
	Namespace, ServiceAccount string
	// Grants are its permissions on the spoke.
	Grants Grants
}

// Subject is the account's sub claim: system:serviceaccount:NS:SA.
func (s FederatedSubject) Subject() string {
	return serviceAccountPrefix + s.Namespace + ":" + s.ServiceAccount
}

// RBACName names its Role, ClusterRole and their bindings.
func (s FederatedSubject) RBACName() string {
	return FederatedRBACPrefix + s.Namespace + ":" + s.ServiceAccount
}

// ErrSubject means a subject that cannot be federated.
var ErrSubject = errors.New("subject")

// ParseSubjectRef reads a hub service account as NS/SA or as its subject
// system:serviceaccount:NS:SA. Any other system: subject (a node, a group,
// system:anonymous) is refused: only service accounts hold hub tokens, and
// those names are the ones Kubernetes reserves.
func ParseSubjectRef(ref string) (namespace, name string, err error) {
	var ok bool
	switch {
	case strings.HasPrefix(ref, serviceAccountPrefix):
		namespace, name, ok = strings.Cut(strings.TrimPrefix(ref, serviceAccountPrefix), ":")
	case strings.HasPrefix(ref, systemPrefix):
		return "", "", fmt.Errorf("%w %q: under %q only %sNS:SA may be federated", ErrSubject, ref, systemPrefix, serviceAccountPrefix)
	default:
		namespace, name, ok = strings.Cut(ref, "/")
	}
	if !ok {
		return "", "", fmt.Errorf("%w %q: want NS/SA or %sNS:SA", ErrSubject, ref, serviceAccountPrefix)
	}
	var problems []string
	for _, msg := range validation.IsDNS1123Label(namespace) {
		problems = append(problems, fmt.Sprintf("namespace %q: %s", namespace, msg))
	}
	for _, msg := range validation.IsDNS1123Subdomain(name) {
		problems = append(problems, fmt.Sprintf("service account %q: %s", name, msg))
	}
	if len(problems) > 0 {
		return "", "", fmt.Errorf("%w %q: %s", ErrSubject, ref, strings.Join(problems, "; "))
	}
	return namespace, name, nil
}

// Federation is every hub identity a spoke trusts: crucible's controller
// and the federated subjects, all under one username prefix.
type Federation struct {
	// ControllerSubject is the controller's sub claim on the hub.
	ControllerSubject string
	// ControllerUsername is the user the spoke maps it to.
	ControllerUsername string
	// UsernamePrefix is the webhook provider's, the same for every subject.
	UsernamePrefix string
	// Subjects are the other identities.
	Subjects []FederatedSubject
}

// Check refuses a federation that would let a hub identity pass for a
// spoke's own or for another: a username prefix that is empty or under
// system: (then the hub's kueue-system:kueue-controller-manager would be
// the spoke's own Kueue, with its RBAC), a subject twice, the controller's
// own subject (it has its RBAC already), a subject that is not a valid
// service account, or bad grants. Paths are subjects[i] and
// usernamePrefix.
func (f Federation) Check() field.ErrorList {
	var errs field.ErrorList
	if len(f.Subjects) == 0 {
		return nil
	}
	if err := checkUsernamePrefix(f.UsernamePrefix); err != nil {
		errs = append(errs, field.Invalid(field.NewPath("usernamePrefix"), f.UsernamePrefix, err.Error()))
	}
	seen := map[string]int{}
	for i, s := range f.Subjects {
		p := field.NewPath("subjects").Index(i)
		sub := s.Subject()
		if _, _, err := ParseSubjectRef(sub); err != nil {
			errs = append(errs, field.Invalid(p, sub, err.Error()))
			continue
		}
		if j, dup := seen[sub]; dup {
			errs = append(errs, field.Duplicate(p, fmt.Sprintf("%s (as subjects[%d])", sub, j)))
			continue
		}
		seen[sub] = i
		if sub == f.ControllerSubject || f.UsernamePrefix+sub == f.ControllerUsername {
			errs = append(errs, field.Invalid(p, sub, "is crucible's controller, whose trust and RBAC render spoke already prints: no --subject needed"))
			continue
		}
		for _, e := range s.Grants.Validate() {
			if e.Field == topPath.String() {
				e.Field = p.Child("rbac").String()
			} else {
				e.Field = p.Child("rbac").String() + "." + e.Field
			}
			errs = append(errs, e)
		}
	}
	return errs
}

// AllowedSubjects is the webhook provider's allowlist: the controller first,
// then every federated subject in order.
func (f Federation) AllowedSubjects() []string {
	subs := []string{f.ControllerSubject}
	for _, s := range f.Subjects {
		subs = append(subs, s.Subject())
	}
	return subs
}

// RBAC is every federated subject's RBAC on the spoke, bound to the User
// UsernamePrefix + its subject and never to the service account of the
// same name on the spoke: per subject, a Role and RoleBinding in each of
// its namespaces (sorted) and, with cluster rules, a ClusterRole and
// ClusterRoleBinding. Check it first.
func (f Federation) RBAC() []runtime.Object {
	var objs []runtime.Object
	for _, s := range f.Subjects {
		objs = append(objs, federatedRBAC(s, f.UsernamePrefix+s.Subject())...)
	}
	return objs
}

func federatedRBAC(s FederatedSubject, username string) []runtime.Object {
	labels := map[string]string{workpod.LabelManagedBy: workpod.ManagedByValue}
	subjects := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: username}}
	typeMeta := func(kind string) metav1.TypeMeta {
		return metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: kind}
	}
	name := s.RBACName()
	var objs []runtime.Object
	for _, ns := range sortedKeys(s.Grants.Namespaced) {
		meta := metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels}
		objs = append(objs,
			&rbacv1.Role{TypeMeta: typeMeta("Role"), ObjectMeta: *meta.DeepCopy(), Rules: s.Grants.Namespaced[ns]},
			&rbacv1.RoleBinding{
				TypeMeta: typeMeta("RoleBinding"), ObjectMeta: *meta.DeepCopy(), Subjects: subjects,
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
			})
	}
	if len(s.Grants.Cluster) > 0 {
		meta := metav1.ObjectMeta{Name: name, Labels: labels}
		objs = append(objs,
			&rbacv1.ClusterRole{TypeMeta: typeMeta("ClusterRole"), ObjectMeta: *meta.DeepCopy(), Rules: s.Grants.Cluster},
			&rbacv1.ClusterRoleBinding{
				TypeMeta: typeMeta("ClusterRoleBinding"), ObjectMeta: *meta.DeepCopy(), Subjects: subjects,
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
			})
	}
	return objs
}

package render

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/workpod"
)

const controllerUser = "hub:system:serviceaccount:crucible:crucible-controller"

func TestSpokeRBAC(t *testing.T) {
	labels := map[string]string{"app.kubernetes.io/managed-by": "crucible"}
	subject := []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: controllerUser}}
	want := []runtime.Object{
		&rbacv1.Role{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"},
			ObjectMeta: metav1.ObjectMeta{Name: "crucible-controller", Namespace: "loops", Labels: labels},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "create", "delete"}},
				{APIGroups: []string{""}, Resources: []string{"pods/log"}, Verbs: []string{"get"}},
				{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create", "delete"}},
				{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create", "delete"}},
			},
		},
		&rbacv1.RoleBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
			ObjectMeta: metav1.ObjectMeta{Name: "crucible-controller", Namespace: "loops", Labels: labels},
			Subjects:   subject,
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "crucible-controller"},
		},
		&rbacv1.ClusterRole{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
			ObjectMeta: metav1.ObjectMeta{Name: "crucible-controller", Labels: labels},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
				{NonResourceURLs: []string{"/.well-known/openid-configuration", "/openid/v1/jwks"}, Verbs: []string{"get"}},
			},
		},
		&rbacv1.ClusterRoleBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
			ObjectMeta: metav1.ObjectMeta{Name: "crucible-controller", Labels: labels},
			Subjects:   subject,
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "crucible-controller"},
		},
	}
	got := SpokeRBAC(wharf(), controllerUser)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("SpokeRBAC (-want +got):\n%s", diff)
	}

	// The objects share no maps: changing one leaves the others alone.
	got[0].(*rbacv1.Role).Labels["x"] = "y"
	if _, shared := got[1].(*rbacv1.RoleBinding).Labels["x"]; shared {
		t.Error("Role and RoleBinding share a labels map")
	}
}

func TestYAMLSpokeRBAC(t *testing.T) {
	got, err := YAML(SpokeRBAC(wharf(), controllerUser)...)
	if err != nil {
		t.Fatal(err)
	}
	want := `apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  labels:
    app.kubernetes.io/managed-by: crucible
  name: crucible-controller
  namespace: loops
rules:
- apiGroups:
  - ""
  resources:
  - pods
  verbs:
  - get
  - list
  - watch
  - create
  - delete
- apiGroups:
  - ""
  resources:
  - pods/log
  verbs:
  - get
- apiGroups:
  - ""
  resources:
  - configmaps
  verbs:
  - create
  - delete
- apiGroups:
  - ""
  resources:
  - secrets
  verbs:
  - create
  - delete
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  labels:
    app.kubernetes.io/managed-by: crucible
  name: crucible-controller
  namespace: loops
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: crucible-controller
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: User
  name: hub:system:serviceaccount:crucible:crucible-controller
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  labels:
    app.kubernetes.io/managed-by: crucible
  name: crucible-controller
rules:
- apiGroups:
  - authentication.k8s.io
  resources:
  - tokenreviews
  verbs:
  - create
- nonResourceURLs:
  - /.well-known/openid-configuration
  - /openid/v1/jwks
  verbs:
  - get
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  labels:
    app.kubernetes.io/managed-by: crucible
  name: crucible-controller
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: crucible-controller
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: User
  name: hub:system:serviceaccount:crucible:crucible-controller
`
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("YAML (-want +got):\n%s", diff)
	}
}

func TestYAMLTurn(t *testing.T) {
	objs, err := Turn(wharf(), samplePods(), "crucible", check(t, sampleWorkPod()))
	if err != nil {
		t.Fatal(err)
	}
	first, err := YAML(objs.List()...)
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		again, err := YAML(objs.List()...)
		if err != nil {
			t.Fatal(err)
		}
		if string(again) != string(first) {
			t.Fatal("YAML is not deterministic")
		}
	}
	out := string(first)
	for _, absent := range []string{"status:", "creationTimestamp"} {
		if strings.Contains(out, absent) {
			t.Errorf("YAML contains %q:\n%s", absent, out)
		}
	}
	for _, present := range []string{"expirationSeconds: 7200\n", "api-key: czNjcmV0AP8=\n", "immutable: true\n"} {
		if !strings.Contains(out, present) {
			t.Errorf("YAML lacks %q:\n%s", present, out)
		}
	}

	// Each document reads back into exactly the object it came from.
	docs := strings.Split(out, "---\n")
	if len(docs) != 3 {
		t.Fatalf("%d documents, want 3 (Pod, ConfigMap, Secret):\n%s", len(docs), out)
	}
	var pod corev1.Pod
	var cm corev1.ConfigMap
	var secret corev1.Secret
	for i, into := range []any{&pod, &cm, &secret} {
		if err := yaml.UnmarshalStrict([]byte(docs[i]), into); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
	}
	if diff := cmp.Diff(objs, Objects{Pod: &pod, ConfigMap: &cm, Secret: &secret}); diff != "" {
		t.Errorf("read back (-rendered +read):\n%s", diff)
	}
}

// TestYAMLControlCharacters: arguments, files and environment values may hold
// any text; the YAML must quote it and read back unchanged.
func TestYAMLControlCharacters(t *testing.T) {
	w := workpod.WorkPod{
		ID: "t", Kind: "turn", Image: "busybox",
		Args:  []string{"\x1b[31mred\x1b[0m", "del\x7f", "tab\tnl\n", "yes", "007", "- x", "a: b"},
		Env:   []workpod.EnvVar{{Name: "NUL", Value: "a\x00b"}},
		Files: map[string]string{"f": "\x01\x02 line\r\n"},
	}
	objs, err := Turn(wharf(), defaultedPods(), "crucible", check(t, w))
	if err != nil {
		t.Fatal(err)
	}
	out, err := YAML(objs.Pod, objs.ConfigMap)
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(out), "---\n")
	var pod corev1.Pod
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict([]byte(docs[0]), &pod); err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict([]byte(docs[1]), &cm); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(objs.Pod, &pod); diff != "" {
		t.Errorf("pod read back (-rendered +read):\n%s", diff)
	}
	if diff := cmp.Diff(objs.ConfigMap, &cm); diff != "" {
		t.Errorf("ConfigMap read back (-rendered +read):\n%s", diff)
	}
}

func TestYAMLErrors(t *testing.T) {
	tests := []struct {
		name string
		objs []runtime.Object
		want string
	}{
		{name: "no kind", objs: []runtime.Object{&corev1.Pod{}}, want: "object 0 (*v1.Pod): no apiVersion or kind"},
		{name: "nil", objs: []runtime.Object{SpokeRBAC(wharf(), "u")[0], nil}, want: "object 1 (<nil>): nil object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := YAML(tt.objs...)
			if out != nil || err == nil || err.Error() != tt.want {
				t.Errorf("YAML = %q, %v; want nil, %q", out, err, tt.want)
			}
		})
	}
	if out, err := YAML(); err != nil || len(out) != 0 {
		t.Errorf("YAML() = %q, %v; want empty", out, err)
	}
}

// run_live adds pods/portforward create to the Role and nothing else; off,
// no rule names pods/portforward at all.
func TestSpokeRBACRunLive(t *testing.T) {
	off := SpokeRBAC(profile.ClusterEntry{Name: "wharf", LoopNamespace: "loops"}, controllerUser)
	on := SpokeRBAC(profile.ClusterEntry{Name: "wharf", LoopNamespace: "loops", RunLive: true}, controllerUser)
	for _, obj := range off {
		if strings.Contains(mustYAML(t, obj), "portforward") {
			t.Errorf("without run_live the RBAC names portforward:\n%s", mustYAML(t, obj))
		}
	}
	offRole, onRole := off[0].(*rbacv1.Role), on[0].(*rbacv1.Role)
	want := append(append([]rbacv1.PolicyRule{}, offRole.Rules...),
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/portforward"}, Verbs: []string{"create"}})
	if diff := cmp.Diff(want, onRole.Rules); diff != "" {
		t.Errorf("Role rules with run_live (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(off[1:], on[1:]); diff != "" {
		t.Errorf("run_live changed more than the Role (-off +on):\n%s", diff)
	}
}

func mustYAML(t *testing.T, obj runtime.Object) string {
	t.Helper()
	data, err := yaml.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// capacity adds a ClusterRole reading nodes and pods cluster-wide, bound to
// the controller, after everything else; off, no rule names nodes and no
// ClusterRole names pods.
func TestSpokeRBACCapacity(t *testing.T) {
	off := SpokeRBAC(profile.ClusterEntry{Name: "wharf", LoopNamespace: "loops"}, controllerUser)
	on := SpokeRBAC(profile.ClusterEntry{Name: "wharf", LoopNamespace: "loops", Capacity: true}, controllerUser)
	for _, obj := range off {
		for _, rule := range rulesOf(obj) {
			_, clusterWide := obj.(*rbacv1.ClusterRole)
			if slices.Contains(rule.Resources, "nodes") || (clusterWide && slices.Contains(rule.Resources, "pods")) {
				t.Errorf("without capacity %T grants %v", obj, rule)
			}
		}
	}
	if diff := cmp.Diff(off, on[:len(off)]); diff != "" {
		t.Errorf("capacity changed the other objects (-off +on):\n%s", diff)
	}
	want := []runtime.Object{
		&rbacv1.ClusterRole{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
			ObjectMeta: metav1.ObjectMeta{Name: "crucible-controller-capacity", Labels: map[string]string{"app.kubernetes.io/managed-by": "crucible"}},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
				{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "watch"}},
			},
		},
		&rbacv1.ClusterRoleBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
			ObjectMeta: metav1.ObjectMeta{Name: "crucible-controller-capacity", Labels: map[string]string{"app.kubernetes.io/managed-by": "crucible"}},
			Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: controllerUser}},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "crucible-controller-capacity"},
		},
	}
	if diff := cmp.Diff(want, on[len(off):]); diff != "" {
		t.Errorf("capacity objects (-want +got):\n%s", diff)
	}
}

func rulesOf(obj runtime.Object) []rbacv1.PolicyRule {
	switch o := obj.(type) {
	case *rbacv1.Role:
		return o.Rules
	case *rbacv1.ClusterRole:
		return o.Rules
	}
	return nil
}

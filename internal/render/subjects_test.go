package render

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"sigs.k8s.io/yaml"
)

const (
	controllerSubject = "system:serviceaccount:crucible:crucible-controller"
	kueueSubject      = "system:serviceaccount:kueue-system:kueue-controller-manager"
	kueueUser         = "hub:" + kueueSubject
)

func kueueFederation(g Grants) Federation {
	return Federation{
		ControllerSubject: controllerSubject, ControllerUsername: "hub:" + controllerSubject, UsernamePrefix: "hub:",
		Subjects: []FederatedSubject{{Namespace: "kueue-system", ServiceAccount: "kueue-controller-manager", Grants: g}},
	}
}

// A federated subject's RBAC is a Role per namespace and a ClusterRole, each
// bound to the prefixed hub user and to nothing on the spoke of the same
// name.
func TestFederationRBAC(t *testing.T) {
	pods := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}}}
	jobs := []rbacv1.PolicyRule{{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Verbs: []string{"create"}}}
	f := kueueFederation(Grants{Namespaced: map[string][]rbacv1.PolicyRule{"team-b": pods, "team-a": jobs}, Cluster: pods})
	if errs := f.Check(); len(errs) > 0 {
		t.Fatal(errs)
	}
	name := "crucible-federated:kueue-system:kueue-controller-manager"
	labels := map[string]string{"app.kubernetes.io/managed-by": "crucible"}
	subjects := []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: kueueUser}}
	tm := func(kind string) metav1.TypeMeta {
		return metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: kind}
	}
	role := func(ns string, rules []rbacv1.PolicyRule) []runtime.Object {
		meta := metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels}
		return []runtime.Object{
			&rbacv1.Role{TypeMeta: tm("Role"), ObjectMeta: meta, Rules: rules},
			&rbacv1.RoleBinding{TypeMeta: tm("RoleBinding"), ObjectMeta: meta, Subjects: subjects,
				RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name}},
		}
	}
	meta := metav1.ObjectMeta{Name: name, Labels: labels}
	want := append(append(role("team-a", jobs), role("team-b", pods)...),
		&rbacv1.ClusterRole{TypeMeta: tm("ClusterRole"), ObjectMeta: meta, Rules: pods},
		&rbacv1.ClusterRoleBinding{TypeMeta: tm("ClusterRoleBinding"), ObjectMeta: meta, Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name}},
	)
	if diff := cmp.Diff(want, f.RBAC()); diff != "" {
		t.Errorf("RBAC (-want +got):\n%s", diff)
	}
	if _, err := YAML(f.RBAC()...); err != nil {
		t.Errorf("YAML: %v", err)
	}

	onlyNS := kueueFederation(Grants{Namespaced: map[string][]rbacv1.PolicyRule{"team-a": jobs}})
	if diff := cmp.Diff(role("team-a", jobs), onlyNS.RBAC()); diff != "" {
		t.Errorf("namespaced grants only: no ClusterRole (-want +got):\n%s", diff)
	}
}

// The webhook's allowlist and kube-apiserver's claim rule accept the
// controller and every federated subject, all under the one prefix.
func TestFederationAllowedSubjects(t *testing.T) {
	f := kueueFederation(Grants{})
	f.Subjects = append(f.Subjects, FederatedSubject{Namespace: "argocd", ServiceAccount: "argocd-application-controller"})
	want := []string{controllerSubject, kueueSubject, "system:serviceaccount:argocd:argocd-application-controller"}
	if diff := cmp.Diff(want, f.AllowedSubjects()); diff != "" {
		t.Errorf("allowed subjects (-want +got):\n%s", diff)
	}
	trust := HubTrust{Issuer: "https://kubernetes.default.svc", DiscoveryURL: "https://m/.well-known/openid-configuration",
		Audience: "wharf", AllowedSubjects: f.AllowedSubjects(), UsernamePrefix: f.UsernamePrefix}
	hook, err := WebhookConfig(trust)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Providers []struct {
			AllowedSubjects []string `json:"allowedSubjects"`
		} `json:"providers"`
	}
	if err := yaml.Unmarshal(hook, &file); err != nil || len(file.Providers) != 1 {
		t.Fatalf("webhook config %s: %v", hook, err)
	}
	if diff := cmp.Diff(want, file.Providers[0].AllowedSubjects); diff != "" {
		t.Errorf("webhook allowedSubjects (-want +got):\n%s", diff)
	}
	builtin, err := AuthenticationConfiguration(trust)
	if err != nil {
		t.Fatal(err)
	}
	var cfg apiserverv1.AuthenticationConfiguration
	if err := yaml.UnmarshalStrict(builtin, &cfg); err != nil || len(cfg.JWT) != 1 {
		t.Fatalf("builtin config %s: %v", builtin, err)
	}
	wantRule := []apiserverv1.ClaimValidationRule{{
		Expression: `claims.sub == "` + strings.Join(want, `" || claims.sub == "`) + `"`, Message: "subject not allowed",
	}}
	if diff := cmp.Diff(wantRule, cfg.JWT[0].ClaimValidationRules); diff != "" {
		t.Errorf("builtin claim rule (-want +got):\n%s", diff)
	}
}

// Check refuses every federation that would let a hub identity pass for
// another one, each problem with its path.
func TestFederationCheckRefuses(t *testing.T) {
	good := Grants{Cluster: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}}}}
	sub := func(ns, sa string) FederatedSubject {
		return FederatedSubject{Namespace: ns, ServiceAccount: sa, Grants: good}
	}
	for _, tc := range []struct {
		name   string
		modify func(*Federation)
		want   field.ErrorList
	}{
		{"empty prefix", func(f *Federation) { f.UsernamePrefix = "" }, field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "usernamePrefix"}}},
		{"blank prefix", func(f *Federation) { f.UsernamePrefix = " " }, field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "usernamePrefix"}}},
		{"system: prefix", func(f *Federation) { f.UsernamePrefix = "system:hub:" }, field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "usernamePrefix"}}},
		{"twice", func(f *Federation) { f.Subjects = append(f.Subjects, f.Subjects[0]) }, field.ErrorList{{Type: field.ErrorTypeDuplicate, Field: "subjects[1]"}}},
		{"the controller", func(f *Federation) { f.Subjects = append(f.Subjects, sub("crucible", "crucible-controller")) },
			field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "subjects[1]"}}},
		{"the controller's user", func(f *Federation) {
			f.ControllerUsername = "hub:system:serviceaccount:crucible--ext:ctl"
			f.Subjects = append(f.Subjects, sub("crucible--ext", "ctl"))
		}, field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "subjects[1]"}}},
		{"bad namespace", func(f *Federation) { f.Subjects[0].Namespace = "Kueue" }, field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "subjects[0]"}}},
		{"bad account", func(f *Federation) { f.Subjects[0].ServiceAccount = "a:b" }, field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "subjects[0]"}}},
		{"no grants", func(f *Federation) { f.Subjects[0].Grants = Grants{} }, field.ErrorList{{Type: field.ErrorTypeRequired, Field: "subjects[0].rbac"}}},
		{"bad grants", func(f *Federation) {
			f.Subjects[0].Grants = Grants{Cluster: []rbacv1.PolicyRule{{Resources: []string{"pods"}, Verbs: []string{"get"}}}}
		},
			field.ErrorList{{Type: field.ErrorTypeRequired, Field: "subjects[0].rbac.cluster[0].apiGroups"}}},
	} {
		f := kueueFederation(good)
		tc.modify(&f)
		got := f.Check()
		var gotShort field.ErrorList
		for _, e := range got {
			gotShort = append(gotShort, &field.Error{Type: e.Type, Field: e.Field})
		}
		if diff := cmp.Diff(tc.want, gotShort); diff != "" {
			t.Errorf("%s: %v (-want +got):\n%s", tc.name, got, diff)
		}
	}

	f := kueueFederation(good)
	f.UsernamePrefix = ""
	f.Subjects = nil
	if errs := f.Check(); len(errs) > 0 {
		t.Errorf("no federated subjects: the controller's own checks apply, not these: %v", errs)
	}
}

func TestParseSubjectRef(t *testing.T) {
	for _, tc := range []struct{ ref, ns, sa, err string }{
		{"kueue-system/kueue-controller-manager", "kueue-system", "kueue-controller-manager", ""},
		{kueueSubject, "kueue-system", "kueue-controller-manager", ""},
		{"argocd/argocd.application-controller", "argocd", "argocd.application-controller", ""},
		{"system:node:worker-1", "", "", `under "system:" only system:serviceaccount:NS:SA`},
		{"system:masters", "", "", `under "system:" only`},
		{"system:serviceaccount:kueue-system", "", "", "want NS/SA or system:serviceaccount:NS:SA"},
		{"alice", "", "", "want NS/SA"},
		{"Kueue/manager", "", "", `namespace "Kueue": a lowercase RFC 1123 label`},
		{"kueue.system/manager", "", "", `namespace "kueue.system"`},
		{strings.Repeat("n", 64) + "/manager", "", "", "must be no more than 63 characters"},
		{"kueue/" + strings.Repeat("s", 254), "", "", "must be no more than 253 characters"},
		{"kueue/a/b", "", "", `service account "a/b"`},
		{"kueue/", "", "", `service account ""`},
		{"/manager", "", "", `namespace ""`},
	} {
		ns, sa, err := ParseSubjectRef(tc.ref)
		switch {
		case tc.err == "" && (err != nil || ns != tc.ns || sa != tc.sa):
			t.Errorf("%q: %q %q %v; want %q %q", tc.ref, ns, sa, err, tc.ns, tc.sa)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: %v; want an error containing %q", tc.ref, err, tc.err)
		}
	}
}

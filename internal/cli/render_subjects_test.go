package cli

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	rbacv1 "k8s.io/api/rbac/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

const kueueRef = "kueue-system/kueue-controller-manager"

// renderSpoke runs render spoke on the example profile's wharf.
func renderSpoke(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := Run(t.Context(), append([]string{"render", "spoke", "--config", exampleProfile, "--cluster", "wharf"}, args...), &out, &errOut)
	return out.String(), err
}

// rbacObject is the fields of a Role, ClusterRole or binding these tests
// look at.
type rbacObject struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name, Namespace string
	} `json:"metadata"`
	Rules    []rbacv1.PolicyRule `json:"rules"`
	Subjects []rbacv1.Subject    `json:"subjects"`
}

func decodeRBAC(t *testing.T, stream string) map[string]rbacObject {
	t.Helper()
	objs := map[string]rbacObject{}
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(stream)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatal(err)
		}
		var o rbacObject
		if err := yaml.Unmarshal(doc, &o); err != nil {
			t.Fatal(err)
		}
		objs[o.Kind+" "+o.Metadata.Namespace+"/"+o.Metadata.Name] = o
	}
}

// --subject with a preset and with a file prints each subject's RBAC,
// bound to the prefixed hub user, after the controller's own.
func TestRenderSpokeSubjects(t *testing.T) {
	rules := writeFile(t, t.TempDir(), "mine.yaml", "namespaced:\n  tools:\n  - {apiGroups: [apps], resources: [deployments], verbs: [get]}\n")
	out, err := renderSpoke(t, "--namespace=false", "--username-prefix", "fed:", "--allow-cluster-wide",
		"--subject", kueueRef+"=multikueue",
		"--subject", "system:serviceaccount:argocd:argocd-application-controller=argocd:apps,web",
		"--subject", "tools/mine="+rules)
	if err != nil {
		t.Fatal(err)
	}
	objs := decodeRBAC(t, out)
	var names []string
	for k := range objs {
		names = append(names, k)
	}
	wantNames := []string{
		"Role loops/crucible-controller", "RoleBinding loops/crucible-controller",
		"ClusterRole /crucible-controller", "ClusterRoleBinding /crucible-controller",
		"ClusterRole /crucible-federated:kueue-system:kueue-controller-manager",
		"ClusterRoleBinding /crucible-federated:kueue-system:kueue-controller-manager",
		"Role apps/crucible-federated:argocd:argocd-application-controller",
		"RoleBinding apps/crucible-federated:argocd:argocd-application-controller",
		"Role web/crucible-federated:argocd:argocd-application-controller",
		"RoleBinding web/crucible-federated:argocd:argocd-application-controller",
		"Role tools/crucible-federated:tools:mine", "RoleBinding tools/crucible-federated:tools:mine",
	}
	if diff := cmp.Diff(wantNames, names, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("objects (-want +got):\n%s", diff)
	}
	user := func(name string) []rbacv1.Subject {
		return []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: name}}
	}
	for key, want := range map[string][]rbacv1.Subject{
		"ClusterRoleBinding /crucible-federated:kueue-system:kueue-controller-manager": user("fed:system:serviceaccount:kueue-system:kueue-controller-manager"),
		"RoleBinding web/crucible-federated:argocd:argocd-application-controller":      user("fed:system:serviceaccount:argocd:argocd-application-controller"),
		"RoleBinding tools/crucible-federated:tools:mine":                              user("fed:system:serviceaccount:tools:mine"),
	} {
		if diff := cmp.Diff(want, objs[key].Subjects); diff != "" {
			t.Errorf("%s subjects (-want +got):\n%s", key, diff)
		}
	}
	wantRules := []rbacv1.PolicyRule{{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"get"}}}
	if diff := cmp.Diff(wantRules, objs["Role tools/crucible-federated:tools:mine"].Rules); diff != "" {
		t.Errorf("the file's rules (-want +got):\n%s", diff)
	}
	if n := len(objs["ClusterRole /crucible-federated:kueue-system:kueue-controller-manager"].Rules); n != 23 {
		t.Errorf("multikueue ClusterRole has %d rules, want Kueue's 23", n)
	}
}

// Without --allow-cluster-wide, multikueue:NS is Kueue's role in NS and
// only list and watch cluster-wide, and nothing reaches the loop namespace.
func TestRenderSpokeSubjectsMultiKueueNamespaced(t *testing.T) {
	out, err := renderSpoke(t, "--namespace=false", "--subject", kueueRef+"=multikueue:mk,batch")
	if err != nil {
		t.Fatal(err)
	}
	objs := decodeRBAC(t, out)
	for _, key := range []string{"Role mk/crucible-federated:kueue-system:kueue-controller-manager", "Role batch/crucible-federated:kueue-system:kueue-controller-manager"} {
		if n := len(objs[key].Rules); n != 23 {
			t.Errorf("%s has %d rules, want Kueue's 23", key, n)
		}
	}
	for key, o := range objs {
		if strings.HasPrefix(key, "Role loops/crucible-federated") || strings.HasPrefix(key, "RoleBinding loops/crucible-federated") {
			t.Errorf("%s reaches the loop namespace", key)
		}
		if key != "ClusterRole /crucible-federated:kueue-system:kueue-controller-manager" {
			continue
		}
		for _, r := range o.Rules {
			if !cmp.Equal(r.Verbs, []string{"list", "watch"}) || slices.Contains(r.Resources, "pods") {
				t.Errorf("cluster-wide rule %v: want list and watch, never of pods", r)
			}
		}
	}
}

// --authn webhook and builtin accept the federated subjects after the
// controller's.
func TestRenderSpokeSubjectsAllowlist(t *testing.T) {
	args := []string{"--subject", kueueRef + "=multikueue:mk", "--subject", "argocd/argocd-application-controller=argocd:apps"}
	out, err := renderSpoke(t, append([]string{"--authn", "webhook"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Providers []struct {
			AllowedSubjects []string `json:"allowedSubjects"`
		} `json:"providers"`
	}
	if err := yaml.Unmarshal([]byte(out), &file); err != nil || len(file.Providers) != 1 {
		t.Fatalf("%s: %v", out, err)
	}
	want := []string{"system:serviceaccount:crucible:crucible-controller",
		"system:serviceaccount:kueue-system:kueue-controller-manager", "system:serviceaccount:argocd:argocd-application-controller"}
	if diff := cmp.Diff(want, file.Providers[0].AllowedSubjects); diff != "" {
		t.Errorf("webhook allowedSubjects (-want +got):\n%s", diff)
	}
	out, err = renderSpoke(t, append([]string{"--authn", "builtin"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	for _, sub := range want {
		if !strings.Contains(out, `claims.sub == "`+sub+`"`) {
			t.Errorf("builtin config does not accept %s:\n%s", sub, out)
		}
	}
}

// Every bad --subject is refused naming the flag's value, a file's errors
// naming the file and the path in it, and nothing is printed.
func TestRenderSpokeSubjectsRefused(t *testing.T) {
	badKey := writeFile(t, t.TempDir(), "bad.yaml", "cluster:\n- {apiGroups: [\"\"], resources: [pods], verb: [get]}\n")
	badNS := writeFile(t, t.TempDir(), "ns.yaml", "namespaced:\n  Tools: [{apiGroups: [\"\"], resources: [pods], verbs: [get]}]\n")
	missing := filepath.Join(t.TempDir(), "absent.yaml")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--subject", kueueRef}, `--subject "kueue-system/kueue-controller-manager": want NS/SA=RBAC`},
		{[]string{"--subject", kueueRef + "="}, `want NS/SA=RBAC`},
		{[]string{"--subject", "system:node:n1=multikueue"}, `--subject "system:node:n1=multikueue": subject "system:node:n1": under "system:" only`},
		{[]string{"--subject", "Kueue/m=multikueue"}, `--subject "Kueue/m=multikueue": subject "Kueue/m": namespace "Kueue"`},
		{[]string{"--subject", "x/y=" + badKey}, `--subject "x/y=` + badKey + `": rules file ` + badKey + `: cluster[0].verb: Forbidden: unknown key`},
		{[]string{"--subject", "x/y=" + badNS}, `rules file ` + badNS + `: namespaced[Tools]: Invalid value: "Tools"`},
		{[]string{"--subject", "x/y=" + missing}, `--subject "x/y=` + missing + `": rules file: open ` + missing},
		{[]string{"--subject", "argocd/ctl=argocd"}, `--subject "argocd/ctl=argocd": preset argocd needs the namespaces`},
		{[]string{"--subject", kueueRef + "=multikueue"}, `--subject "kueue-system/kueue-controller-manager=multikueue": preset multikueue needs the namespaces MultiKueue dispatches to (multikueue:NS[,NS...]): Kueue's cluster-wide role covers the loop namespace "loops"`},
		{[]string{"--subject", kueueRef + "=multikueue:mk,loops"}, `--subject "kueue-system/kueue-controller-manager=multikueue:mk,loops": preset multikueue: namespace "loops" covers the loop namespace`},
		{[]string{"--subject", "argocd/ctl=argocd:loops"}, `preset argocd: namespace "loops" covers the loop namespace`},
		{[]string{"--subject", kueueRef + "=multikueue:mk", "--subject", "system:serviceaccount:kueue-system:kueue-controller-manager=argocd:apps"},
			`--subject "system:serviceaccount:kueue-system:kueue-controller-manager=argocd:apps": Duplicate value`},
		{[]string{"--subject", "crucible/crucible-controller=multikueue:mk"}, `--subject "crucible/crucible-controller=multikueue:mk": Invalid value: "system:serviceaccount:crucible:crucible-controller": is crucible's controller`},
		{[]string{"--subject", kueueRef + "=multikueue:mk", "--username-prefix", ""}, `--username-prefix: Invalid value: "": username prefix: must not be empty`},
		{[]string{"--subject", kueueRef + "=multikueue:mk", "--username-prefix", "system:hub:"}, `--username-prefix: Invalid value: "system:hub:"`},
		{[]string{"--authn", "webhook", "--subject", kueueRef + "=multikueue:mk", "--username-prefix", ""}, `--username-prefix: Invalid value: ""`},
	} {
		out, err := renderSpoke(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v; want an error containing %q", tc.args, err, tc.want)
		}
		if out != "" {
			t.Errorf("%v: printed %q", tc.args, out)
		}
	}
}

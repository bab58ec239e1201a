package render

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
)

// A rules file in YAML or JSON decodes to exactly its rules, per namespace
// and cluster-wide.
func TestParseGrants(t *testing.T) {
	want := Grants{
		Namespaced: map[string][]rbacv1.PolicyRule{
			"team-a": {{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"get", "list"}}},
			"team-b": {{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"settings"}, Verbs: []string{"get"}}},
		},
		Cluster: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"list"}},
			{NonResourceURLs: []string{"/healthz", "*"}, Verbs: []string{"get"}},
		},
	}
	for name, doc := range map[string]string{
		"yaml": `
namespaced:
  team-a:
  - apiGroups: [apps]
    resources: [deployments]
    verbs: [get, list]
  team-b:
  - apiGroups: [""]
    resources: [configmaps]
    resourceNames: [settings]
    verbs: [get]
cluster:
- {apiGroups: [""], resources: [namespaces], verbs: [list]}
- nonResourceURLs: [/healthz, "*"]
  verbs: [get]
`,
		"json": `{"cluster": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list"]},
  {"nonResourceURLs": ["/healthz", "*"], "verbs": ["get"]}],
 "namespaced": {"team-a": [{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list"]}],
  "team-b": [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["settings"], "verbs": ["get"]}]}}`,
	} {
		got, err := ParseGrants([]byte(doc))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
}

// Every way a file can be wrong is refused with the path of the bad value,
// and all problems are reported at once.
func TestParseGrantsRefuses(t *testing.T) {
	rule := `{apiGroups: [""], resources: [pods], verbs: [get]}`
	for _, tc := range []struct{ name, doc, want string }{
		{"empty", ``, `<top>: Invalid value: "null": want an object with namespaced and/or cluster`},
		{"a list", `[` + rule + `]`, `<top>: Invalid value: "list": want an object`},
		{"nothing granted", `{}`, `<top>: Required value: grants nothing`},
		{"empty lists", `{cluster: []}`, `<top>: Required value: grants nothing`},
		{"unknown top key", `{cluster: [` + rule + `], clusterwide: []}`, `clusterwide: Forbidden: unknown key: want namespaced or cluster`},
		{"unknown rule key", `{cluster: [{apiGroups: [""], resources: [pods], verb: [get]}]}`,
			`cluster[0].verb: Forbidden: unknown key: want one of apiGroups, nonResourceURLs, resourceNames, resources, verbs`},
		{"duplicate key", "cluster: [" + rule + "]\ncluster: [" + rule + "]\n", `not YAML or JSON`},
		{"not YAML", `{cluster: [`, `not YAML or JSON`},
		{"namespaced a list", `{namespaced: [` + rule + `]}`, `namespaced: Invalid value: "list": want an object of namespace: [rules]`},
		{"rules an object", `{cluster: ` + rule + `}`, `cluster: Invalid value: "object": want a list of rules`},
		{"rule a string", `{cluster: [pods]}`, `cluster[0]: Invalid value: "string": want a rule object`},
		{"verbs a string", `{namespaced: {loops: [{apiGroups: [""], resources: [pods], verbs: get}]}}`,
			`namespaced[loops][0].verbs: Invalid value: "string": want a list of strings`},
		{"verb a number", `{cluster: [{apiGroups: [""], resources: [pods], verbs: [get, 7]}]}`,
			`cluster[0].verbs[1]: Invalid value: "number": want a string`},
		{"bad namespace", `{namespaced: {Team_A: [` + rule + `]}}`, `namespaced[Team_A]: Invalid value: "Team_A": namespace: a lowercase RFC 1123 label`},
		{"namespace without rules", `{namespaced: {loops: []}}`, `namespaced[loops]: Required value: at least one rule`},
		{"no verbs", `{cluster: [{apiGroups: [""], resources: [pods]}]}`, `cluster[0].verbs: Required value: at least one verb`},
		{"empty verb", `{cluster: [{apiGroups: [""], resources: [pods], verbs: [" "]}]}`, `cluster[0].verbs[0]: Invalid value: " ": must not be empty`},
		{"no resources", `{namespaced: {loops: [{apiGroups: [""], verbs: [get]}]}}`, `namespaced[loops][0].resources: Required value: at least one resource`},
		{"no api groups", `{cluster: [{resources: [pods], verbs: [get]}]}`, `cluster[0].apiGroups: Required value: at least one API group`},
		{"URLs in a namespace", `{namespaced: {loops: [{nonResourceURLs: [/healthz], verbs: [get]}]}}`,
			`namespaced[loops][0].nonResourceURLs: Forbidden: only in cluster rules`},
		{"URLs and resources", `{cluster: [{apiGroups: [""], resources: [pods], nonResourceURLs: [/healthz], verbs: [get]}]}`,
			`cluster[0]: Forbidden: a rule grants nonResourceURLs or resources, not both`},
		{"relative URL", `{cluster: [{nonResourceURLs: [healthz], verbs: [get]}]}`, `cluster[0].nonResourceURLs[0]: Invalid value: "healthz"`},
		{"too large", "cluster: []\n" + strings.Repeat("#", MaxGrantsBytes), `larger than 1048576 bytes`},
	} {
		_, err := ParseGrants([]byte(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error containing %q", tc.name, err, tc.want)
		}
	}

	_, err := ParseGrants([]byte(`{clusterwide: [], namespaced: {loops: [{verbs: [get], verb: [x]}]}}`))
	for _, want := range []string{"clusterwide: Forbidden", "namespaced[loops][0].verb: Forbidden"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("two problems: %v; want both reported, %q among them", err, want)
		}
	}
}

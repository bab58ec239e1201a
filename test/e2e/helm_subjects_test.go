package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/render"
)

const subjectsValues = "ci/subjects-values.yaml"

// chartSubjects is the spoke chart's extraSubjects as render spoke's
// --subject flags would give them: presets through render.PresetGrants,
// rules through the rules-file parser.
func chartSubjects(t *testing.T) []render.FederatedSubject {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(chartDir("crucible-spoke"), subjectsValues))
	if err != nil {
		t.Fatal(err)
	}
	var values struct {
		ExtraSubjects []struct {
			Subject, Preset  string
			Namespaces       []string
			AllowClusterWide bool `json:"allowClusterWide"`
			Rules            json.RawMessage
		} `json:"extraSubjects"`
	}
	if err := yaml.UnmarshalStrict(data, &values); err != nil {
		t.Fatal(err)
	}
	var subs []render.FederatedSubject
	for _, e := range values.ExtraSubjects {
		ns, sa, err := render.ParseSubjectRef(e.Subject)
		if err != nil {
			t.Fatal(err)
		}
		var g render.Grants
		if e.Preset != "" {
			g, err = render.PresetGrants(e.Preset, e.Namespaces, render.PresetScope{LoopNamespace: "loops", AllowClusterWide: e.AllowClusterWide})
		} else {
			g, err = render.ParseGrants(e.Rules)
		}
		if err != nil {
			t.Fatalf("%s: %v", e.Subject, err)
		}
		subs = append(subs, render.FederatedSubject{Namespace: ns, ServiceAccount: sa, Grants: g})
	}
	if len(subs) != 3 {
		t.Fatalf("%s has %d extraSubjects, want the three this test is about", subjectsValues, len(subs))
	}
	return subs
}

// The spoke chart's extraSubjects render the same RBAC, object for object,
// and the same webhook allowlist as render spoke --subject.
func TestHelmSpokeSubjectsMatchRender(t *testing.T) {
	_, objs := helmTemplate(t, "crucible-spoke", "crucible", chartCase{chart: "crucible-spoke", values: subjectsValues}.args()...)
	fed := render.Federation{
		ControllerSubject: devstack.HubSubject, ControllerUsername: controllerUser, UsernamePrefix: "hub:",
		Subjects: chartSubjects(t),
	}
	if errs := fed.Check(); len(errs) > 0 {
		t.Fatal(errs)
	}
	entry := profile.ClusterEntry{Name: "wharf", LoopNamespace: "loops"}
	wantChartRBAC(t, "chart RBAC vs render spoke --subject", objs,
		append(append([]runtime.Object{render.LoopNamespace(entry)}, render.SpokeRBAC(entry, controllerUser)...), fed.RBAC()...)...)

	trust := render.HubTrust{
		Issuer: devstack.Issuer, DiscoveryURL: "https://crucible-ext.hub.example.com/.well-known/openid-configuration",
		Audience: "wharf", AllowedSubjects: fed.AllowedSubjects(), UsernamePrefix: "hub:",
	}
	wantCfg, err := render.WebhookConfig(trust)
	if err != nil {
		t.Fatal(err)
	}
	var wantMap, gotMap map[string]any
	mustYAML(t, wantCfg, &wantMap)
	gotMap = chartWebhookConfig(t, objs)
	if diff := cmp.Diff(wantMap, gotMap, dropEmptyMaps); diff != "" {
		t.Errorf("webhook config vs render spoke --authn webhook --subject (-render +chart):\n%s", diff)
	}
}

// The chart refuses the extraSubjects render spoke refuses, naming the value.
func TestHelmSpokeSubjectsRefused(t *testing.T) {
	const kueue = `{"subject":"system:serviceaccount:kueue-system:kueue-controller-manager","preset":"multikueue","namespaces":["batch"]}`
	for _, tc := range []struct{ set, want string }{
		{`[` + kueue + `,` + kueue + `]`, "extraSubjects[1]: system:serviceaccount:kueue-system:kueue-controller-manager appears twice (as extraSubjects[0])"},
		{`[{"subject":"system:serviceaccount:crucible:crucible-controller","preset":"multikueue","allowClusterWide":true}]`, "extraSubjects[0]: system:serviceaccount:crucible:crucible-controller is crucible's controller"},
		{`[{"subject":"system:node:n1","preset":"multikueue"}]`, "/extraSubjects/0/subject"},
		{`[{"subject":"system:serviceaccount:Kueue:m","preset":"multikueue"}]`, "/extraSubjects/0/subject"},
		{`[{"subject":"system:serviceaccount:argocd:ctl","preset":"argocd"}]`, "/extraSubjects/0"},
		{`[{"subject":"system:serviceaccount:argocd:ctl","preset":"multikueue","namespaces":["apps"],"rules":{}}]`, "/extraSubjects/0"},
		{`[{"subject":"system:serviceaccount:k:m","preset":"multikueue"}]`, "/extraSubjects/0"},
		{`[{"subject":"system:serviceaccount:k:m","preset":"multikueue","allowClusterWide":false}]`, "/extraSubjects/0"},
		{`[{"subject":"system:serviceaccount:k:m","preset":"multikueue","namespaces":["batch","loops"]}]`,
			`extraSubjects[0]: preset multikueue: namespace "loops" is loopNamespace.name`},
		{`[{"subject":"system:serviceaccount:argocd:ctl","preset":"argocd","namespaces":["loops"]}]`, `extraSubjects[0]: preset argocd: namespace "loops" is loopNamespace.name`},
		{`[{"subject":"system:serviceaccount:t:c","rules":{"cluster":[{"apiGroups":[""],"resources":["pods"],"verb":["get"]}]}}]`, "/extraSubjects/0"},
		{`[{"subject":"system:serviceaccount:t:c","rules":{"namespaced":{"t":[{"nonResourceURLs":["/healthz"],"verbs":["get"]}]}}}]`, "/extraSubjects/0"},
		{`[{"subject":"system:serviceaccount:t:c","rules":{}}]`, "/extraSubjects/0"},
	} {
		_, err := helm(t, "template", "crucible", chartDir("crucible-spoke"), "--set-json", "extraSubjects="+tc.set)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("extraSubjects=%s: %v; want an error containing %q", tc.set, err, tc.want)
		}
	}
	for _, ok := range []string{kueue, `{"subject":"system:serviceaccount:k:m","preset":"multikueue","allowClusterWide":true}`,
		`{"subject":"system:serviceaccount:k:m","preset":"multikueue","namespaces":["loops"],"allowClusterWide":true}`} {
		if _, err := helm(t, "template", "crucible", chartDir("crucible-spoke"), "--set-json", "extraSubjects=["+ok+"]"); err != nil {
			t.Errorf("valid subject %s refused: %v", ok, err)
		}
	}
}

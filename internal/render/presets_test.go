package render

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
)

// kueueWorkerRole is the rules of the ClusterRole in Kueue's
// site/static/examples/multikueue/create-multikueue-kubeconfig.sh, as that
// script writes them, so the preset is checked against the documented text
// rather than against itself.
const kueueWorkerRole = `
cluster:
- {apiGroups: [batch], resources: [jobs], verbs: [create, delete, get, list, watch]}
- {apiGroups: [batch], resources: [jobs/status], verbs: [get]}
- {apiGroups: [""], resources: [pods], verbs: [create, delete, get, list, watch]}
- {apiGroups: [jobset.x-k8s.io], resources: [jobsets], verbs: [create, delete, get, list, watch]}
- {apiGroups: [jobset.x-k8s.io], resources: [jobsets/status], verbs: [get]}
- {apiGroups: [kueue.x-k8s.io], resources: [workloads], verbs: [create, delete, get, list, watch]}
- {apiGroups: [kueue.x-k8s.io], resources: [workloads/status], verbs: [get, patch, update]}
- {apiGroups: [kubeflow.org], resources: [tfjobs], verbs: [create, delete, get, list, watch]}
- {apiGroups: [kubeflow.org], resources: [tfjobs/status], verbs: [get]}
- {apiGroups: [kubeflow.org], resources: [paddlejobs], verbs: [create, delete, get, list, watch]}
- {apiGroups: [kubeflow.org], resources: [paddlejobs/status], verbs: [get]}
- {apiGroups: [kubeflow.org], resources: [pytorchjobs], verbs: [create, delete, get, list, watch]}
- {apiGroups: [kubeflow.org], resources: [pytorchjobs/status], verbs: [get]}
- {apiGroups: [kubeflow.org], resources: [xgboostjobs], verbs: [create, delete, get, list, watch]}
- {apiGroups: [kubeflow.org], resources: [xgboostjobs/status], verbs: [get]}
- {apiGroups: [kubeflow.org], resources: [mpijobs], verbs: [create, delete, get, list, watch]}
- {apiGroups: [kubeflow.org], resources: [mpijobs/status], verbs: [get]}
- {apiGroups: [ray.io], resources: [rayjobs], verbs: [create, delete, get, list, watch]}
- {apiGroups: [ray.io], resources: [rayjobs/status], verbs: [get]}
- {apiGroups: [ray.io], resources: [rayclusters], verbs: [create, delete, get, list, watch]}
- {apiGroups: [ray.io], resources: [rayclusters/status], verbs: [get]}
- {apiGroups: [workload.codeflare.dev], resources: [appwrappers], verbs: [create, delete, get, list, watch]}
- {apiGroups: [workload.codeflare.dev], resources: [appwrappers/status], verbs: [get]}
`

// loops is the spoke's loop namespace in these tests.
var loops = PresetScope{LoopNamespace: "loops"}

// With --allow-cluster-wide and no namespaces, the multikueue preset is
// Kueue's documented ClusterRole, rule for rule.
func TestPresetMultiKueueIsKueuesWorkerRole(t *testing.T) {
	want, err := ParseGrants([]byte(kueueWorkerRole))
	if err != nil {
		t.Fatal(err)
	}
	got, err := PresetGrants(PresetMultiKueue, nil, PresetScope{LoopNamespace: "loops", AllowClusterWide: true})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("multikueue preset vs Kueue's documented role (-doc +preset):\n%s", diff)
	}
}

// Argo CD's preset is its namespace-scoped credential: everything in each
// named namespace, nothing cluster-wide.
func TestPresetArgoCDIsNamespaceScoped(t *testing.T) {
	got, err := PresetGrants(PresetArgoCD, []string{"apps", "web"}, loops)
	if err != nil {
		t.Fatal(err)
	}
	all := []rbacv1.PolicyRule{{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}}}
	want := Grants{Namespaced: map[string][]rbacv1.PolicyRule{"apps": all, "web": all}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("argocd preset (-want +got):\n%s", diff)
	}
}

func TestPresetRefuses(t *testing.T) {
	for _, tc := range []struct {
		name       string
		namespaces []string
		want       string
	}{
		{PresetArgoCD, nil, "preset argocd needs the namespaces Argo CD may deploy to (argocd:NS[,NS...])"},
		{PresetArgoCD, []string{"apps", "apps"}, `preset argocd: namespace "apps" appears twice`},
		{PresetArgoCD, []string{"Apps"}, `preset argocd: namespaced[Apps]: Invalid value: "Apps"`},
		{PresetArgoCD, []string{""}, `preset argocd: namespaced[]: Invalid value: ""`},
		{PresetMultiKueue, nil, `preset multikueue needs the namespaces MultiKueue dispatches to (multikueue:NS[,NS...]): Kueue's cluster-wide role covers the loop namespace "loops"`},
		{PresetMultiKueue, []string{"mk", "loops"}, `preset multikueue: namespace "loops" covers the loop namespace (crucible's work pods`},
		{PresetMultiKueue, []string{"mk", "mk"}, `preset multikueue: namespace "mk" appears twice`},
		{PresetMultiKueue, []string{"MK"}, `preset multikueue: namespaced[MK]: Invalid value: "MK"`},
		{PresetArgoCD, []string{"loops"}, `preset argocd: namespace "loops" covers the loop namespace`},
		{"kueue", nil, `no preset "kueue" (presets: multikueue, argocd)`},
	} {
		_, err := PresetGrants(tc.name, tc.namespaces, loops)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %v: %v; want an error containing %q", tc.name, tc.namespaces, err, tc.want)
		}
	}
}

// Given namespaces, the multikueue preset is Kueue's role in each of them,
// and cluster-wide only the list and watch its watchers need, never of
// pods; --allow-cluster-wide lets a namespace list include the loop
// namespace.
func TestPresetMultiKueueNamespaced(t *testing.T) {
	got, err := PresetGrants(PresetMultiKueue, []string{"mk", "batch"}, loops)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := ParseGrants([]byte(kueueWorkerRole))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(doc.Cluster, got.Namespaced["mk"]); diff != "" || len(got.Namespaced) != 2 || !cmp.Equal(got.Namespaced["mk"], got.Namespaced["batch"]) {
		t.Errorf("namespaced rules (-doc +preset):\n%s\nnamespaces %v", diff, slices.Sorted(maps.Keys(got.Namespaced)))
	}
	for _, r := range got.Cluster {
		if !cmp.Equal(r.Verbs, []string{"list", "watch"}) || slices.Contains(r.Resources, "pods") || strings.Contains(r.Resources[0], "/") {
			t.Errorf("cluster-wide rule %v: want list and watch of a kind MultiKueue watches, never pods", r)
		}
	}
	wantKinds := []string{"jobs", "jobsets", "workloads", "tfjobs", "paddlejobs", "pytorchjobs", "xgboostjobs", "mpijobs", "rayjobs", "rayclusters", "appwrappers"}
	var kinds []string
	for _, r := range got.Cluster {
		kinds = append(kinds, r.Resources...)
	}
	if diff := cmp.Diff(wantKinds, kinds); diff != "" {
		t.Errorf("cluster-wide watches (-want +got):\n%s", diff)
	}
	if _, err := PresetGrants(PresetMultiKueue, []string{"mk", "loops"}, PresetScope{LoopNamespace: "loops", AllowClusterWide: true}); err != nil {
		t.Errorf("the loop namespace with --allow-cluster-wide: %v", err)
	}
}

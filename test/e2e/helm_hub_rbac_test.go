package e2e

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"crucible.dev/crucible/internal/render"
)

// `crucible render hub` and the hub chart grant the same RBAC, object for
// object: what people without Helm apply is what the chart installs.
func TestHelmHubChartMatchesRender(t *testing.T) {
	const ns, sa = "crucible", "crucible-controller"
	_, objs := helmTemplate(t, "crucible-hub", ns, "--set", "serviceAccount.name="+sa)
	chart := map[string]map[string]any{}
	for _, o := range objs {
		switch o.GetKind() {
		case "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			chart[o.GetKind()+"/"+o.GetNamespace()+"/"+o.GetName()] = rbacContent(o)
		}
	}
	rendered := map[string]map[string]any{}
	for _, obj := range render.HubRBAC(ns, sa) {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			t.Fatal(err)
		}
		o := &unstructured.Unstructured{Object: m}
		rendered[o.GetKind()+"/"+o.GetNamespace()+"/"+o.GetName()] = rbacContent(o)
	}
	if diff := cmp.Diff(rendered, chart); diff != "" {
		t.Errorf("RBAC of render hub (-) and of the hub chart (+) differ:\n%s", diff)
	}
}

// rbacContent is what an RBAC object grants: its rules, subjects and role
// reference (labels and the chart's annotations aside).
func rbacContent(o *unstructured.Unstructured) map[string]any {
	out := map[string]any{}
	for _, k := range []string{"rules", "subjects", "roleRef"} {
		if v, ok := o.Object[k]; ok {
			out[k] = v
		}
	}
	return out
}

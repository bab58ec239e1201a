package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/render"
)

// The hub chart's fleet.clusterProfiles: with no spokes of its own the
// chart's profile reads the ClusterProfiles of the namespace (selector,
// access provider, the pins file mounted from the named ConfigMap, the
// spokes' defaults), defaults to placement, and grants the controller
// exactly `crucible render hub --token-request --cluster-profiles`.
func TestHelmHubChartFleet(t *testing.T) {
	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte(`spokes: []
fleet:
  clusterProfiles:
    namespace: fleet
    selector: crucible.dev/fleet=gpu
    serverPinsConfigMap: fleet-pins
    loopNamespace: gpu-loops
    capacity: true
`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, objs := helmTemplate(t, "crucible-hub", "crucible", "-f", values)
	p, err := profile.Parse([]byte(configMapData(t, objs, "crucible-profile", "crucible.toml")))
	if err != nil {
		t.Fatalf("the controller refuses the chart's profile: %v", err)
	}
	f, d := p.Fleet, p.Fleet.ClusterDefaults
	switch {
	case len(p.Clusters) != 0 || p.DefaultCluster != profile.AutoCluster:
		t.Errorf("clusters %d, default_cluster %q: want none and auto", len(p.Clusters), p.DefaultCluster)
	case f.ClusterProfiles != "fleet" || f.Selector != "crucible.dev/fleet=gpu" || f.AccessProvider != render.AccessProviderName:
		t.Errorf("[fleet] %+v", f)
	case f.ServerPins != "/etc/crucible/fleet-pins/server-pins.json":
		t.Errorf("server_pins %q", f.ServerPins)
	case d.LoopNamespace != "gpu-loops" || d.TurnServiceAccount != "crucible-turn" || d.IngestURL != "https://crucible-ext.hub.example.com" ||
		d.IngestAudience != "crucible-ingest" || !d.Capacity || d.TokenExpiration.Seconds() != 3600:
		t.Errorf("[fleet.cluster_defaults] %+v", d)
	}
	var pod corev1.PodTemplateSpec
	tmpl, _, _ := unstructured.NestedMap(find(t, objs, "Deployment", "crucible-controller").Object, "spec", "template")
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(tmpl, &pod); err != nil {
		t.Fatal(err)
	}
	vol := mountedVolume(t, pod, filepath.Dir(f.ServerPins))
	if vol.ConfigMap == nil || vol.ConfigMap.Name != "fleet-pins" || !slices.Contains(vol.ConfigMap.Items, corev1.KeyToPath{Key: render.ServerPinsKey, Path: filepath.Base(f.ServerPins)}) {
		t.Errorf("the pins are not mounted from ConfigMap fleet-pins: %+v", vol)
	}
	var rbac []*unstructured.Unstructured
	for _, o := range objs {
		if strings.HasPrefix(o.GetName(), "crucible-controller-token-request") || strings.HasPrefix(o.GetName(), render.HubClusterProfilesRBACName) {
			rbac = append(rbac, o)
		}
	}
	wantChartRBAC(t, "the fleet's RBAC", rbac, append(render.HubTokenRequestRBAC("crucible", "crucible-controller"),
		render.HubClusterProfilesRBAC("fleet", "crucible", "crucible-controller")...)...)
}

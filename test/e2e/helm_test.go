package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/render"
)

// chartCase is a chart with one set of values, as the acceptance names them:
// defaults, and the two-spoke shape (the hub's two-spokes values, the spoke
// chart for the second of those spokes), and the hub's pod classes adjusted
// per spoke.
type chartCase struct{ name, chart, values string }

var chartCases = []chartCase{
	{"hub defaults", "crucible-hub", ""},
	{"hub two spokes", "crucible-hub", "ci/two-spokes-values.yaml"},
	{"hub pod classes", "crucible-hub", "ci/pod-classes-values.yaml"},
	{"spoke defaults", "crucible-spoke", ""},
	{"spoke dock", "crucible-spoke", "ci/dock-values.yaml"},
}

func (c chartCase) args() []string {
	if c.values == "" {
		return nil
	}
	return []string{"-f", filepath.Join(chartDir(c.chart), c.values)}
}

// helm lint (strict) passes and helm template renders objects that all
// carry apiVersion, kind and name.
func TestHelmLintAndTemplate(t *testing.T) {
	for _, c := range chartCases {
		t.Run(c.name, func(t *testing.T) {
			if out, err := helm(t, append([]string{"lint", "--strict", chartDir(c.chart)}, c.args()...)...); err != nil {
				t.Fatalf("helm lint: %v\n%s", err, out)
			}
			_, objs := helmTemplate(t, c.chart, "crucible", c.args()...)
			if len(objs) < 8 {
				t.Fatalf("rendered %d objects", len(objs))
			}
			for _, o := range objs {
				if o.GetAPIVersion() == "" || o.GetKind() == "" || o.GetName() == "" {
					t.Errorf("object without apiVersion, kind or name: %v", o.Object)
				}
			}
		})
	}
}

// The schema and the templates refuse values that would deploy something
// broken, each with a message naming the value.
func TestHelmRefusesBadValues(t *testing.T) {
	for _, tc := range []struct {
		chart string
		args  []string
		want  string
	}{
		{"crucible-hub", []string{"--set", "replicsa=2"}, "additional properties 'replicsa' not allowed"},
		{"crucible-hub", []string{"--set", "replicas=2"}, "/store/postgres/enabled"},
		{"crucible-hub", []string{"--set", "externalURL=http://hub.example.com"}, "/externalURL"},
		{"crucible-hub", []string{"--set", "spokeTokenExpirationSeconds=60"}, "/spokeTokenExpirationSeconds"},
		{"crucible-hub", []string{"--set", "defaultCluster=nope"}, `defaultCluster "nope" is not one of spokes`},
		{"crucible-hub", []string{"--set", "spokes[0].name=Wharf_1,spokes[0].server=https://x,spokes[0].caBundle=,spokes[0].loopNamespace=loops,spokes[0].turnServiceAccount=t,spokes[0].ingestAudience=a"}, "/spokes/0/name"},
		{"crucible-hub", []string{"--set-json", `pods.classes=[{"name":"x","requests":{"cpu":"1","memory":"1Gi"},"gpuss":1}]`},
			"at '/pods/classes/0': additional properties 'gpuss' not allowed"},
		{"crucible-hub", []string{"--set-json", `pods.classes=[{"defaultFor":["loop","turn"],"requests":{"cpu":"1","memory":"1Gi"}}]`},
			"at '/pods/classes/0': missing property 'name'"},
		{"crucible-hub", []string{"--set-json", `pods.classes=[{"name":"x","requests":{"cpu":"1"}}]`},
			"at '/pods/classes/0/requests': missing property 'memory'"},
		{"crucible-hub", []string{"--set-json", `pods.classes=[{"name":"x","requests":{"cpu":8,"memory":"1Gi"}}]`},
			"at '/pods/classes/0/requests/cpu': got number, want string"},
		{"crucible-hub", []string{"--set-json", `spokes=[` + spokeJSON + `,"classes":{"gpu":{"withold":true}}}]`},
			"at '/spokes/0/classes/gpu': additional properties 'withold' not allowed"},
		{"crucible-hub", []string{"--set-json", `spokes=[` + spokeJSON + `,"classes":{"tpu":{"withhold":true}}}]`},
			`spokes "wharf": classes.tpu is not one of pods.classes`},
		{"crucible-hub", []string{"--set-json", `pods.classes=[{"name":"x","requests":{"cpu":"1","memory":"1Gi"}},{"name":"x","requests":{"cpu":"1","memory":"1Gi"}}]`},
			`pods.classes: the name "x" appears twice`},
		{"crucible-hub", []string{"--set", "ingress.enabled=true"}, "ingress.enabled needs ingest.trustedProxies"},
		{"crucible-hub", []string{"--set", "ingress.enabled=true,ingress.sharedSourceAddress=true"}, ""},
		{"crucible-hub", []string{"--set", "ingress.enabled=true,ingest.trustedProxies={10.244.0.0/16}"}, ""},
		{"crucible-hub", []string{"--set", "api.auth=proxy,api.proxyCIDRs={10.0.0.0/24}"}, `api.auth "proxy" needs api.proxyClientCA`},
		{"crucible-hub", []string{"--set", "api.auth=proxy,api.proxyCIDRs={10.0.0.0/24},api.proxyClientCA.secretName=ca"}, `api.auth "proxy" needs api.proxyClientNames`},
		{"crucible-hub", []string{"--set", "api.auth=proxy,api.proxyCIDRs={10.0.0.0/24},api.proxyClientCA.secretName=ca,api.proxyClientNames={oauth2-proxy}"}, ""},
		{"crucible-hub", []string{"--set", "api.proxyClientNames={oauth2-proxy}"}, `api.proxyClientNames is only used with api.auth "proxy"`},
		{"crucible-hub", []string{"--set", "api.proxyClientCA.secretName=ca"}, `api.proxyClientCA is only used with api.auth "proxy"`},
		{"crucible-hub", []string{"--set", "api.auth=proxy,api.proxyClientCA.secretName=a,api.proxyClientCA.configMapName=b"}, "set secretName or configMapName, not both"},
		{"crucible-hub", []string{"--set-json", `spokes=[` + spokeJSON + `,"runLive":{"enabled":true,"ports":[]}}]`}, "/spokes/0/runLive/ports"},
		{"crucible-hub", []string{"--set-json", `spokes=[` + spokeJSON + `,"runLive":{"enabled":true,"port":7777,"ports":[8888]}}]`}, "run_live_ports"},
		{"crucible-hub", []string{"--set-json", "spokes=[]"}, "spokes is empty and fleet.clusterProfiles.namespace is not set"},
		{"crucible-hub", []string{"--set", "fleet.clusterProfiles.namespace=Fleet_NS"}, "/fleet/clusterProfiles/namespace"},
		{"crucible-hub", []string{"--set", "fleet.clusterProfiles.namespace=fleet,fleet.clusterProfiles.loopNamespace=Loops"}, "/fleet/clusterProfiles/loopNamespace"},
		{"crucible-hub", []string{"--set-json", "spokes=[]", "--set", "fleet.clusterProfiles.namespace=fleet"}, ""},
		{"crucible-spoke", []string{"--set", "hub.usernamePrefix=system:"}, "/hub/usernamePrefix"},
		{"crucible-spoke", []string{"--set", "hub.discoveryURL=http://mirror/.well-known/openid-configuration"}, "/hub/discoveryURL"},
		{"crucible-spoke", []string{"--set", "apiserverKubeconfig.server=http://10.0.0.1:9443"}, "/apiserverKubeconfig/server"},
		{"crucible-spoke", []string{"--set", "hub.subject=alice"}, "/hub/subject"},
	} {
		_, err := helm(t, append([]string{"template", "crucible", chartDir(tc.chart)}, tc.args...)...)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s %v: %v", tc.chart, tc.args, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s %v: error %v, want one containing %q", tc.chart, tc.args, err, tc.want)
		}
	}
}

// spokeJSON is a hub chart spoke entry without its closing brace, for
// --set-json values that add a key to it.
const spokeJSON = `{"name":"wharf","server":"https://x","caBundle":"","loopNamespace":"loops","turnServiceAccount":"t","ingestAudience":"a","qps":1,"burst":1`

// The spoke chart's RBAC is `crucible render spoke`'s, object for object,
// and its webhook config and kube-apiserver kubeconfig are those of render
// spoke --authn webhook and webhook-kubeconfig.
func TestHelmSpokeChartMatchesRender(t *testing.T) {
	for _, tc := range []struct {
		values                string
		spoke, ns, webhookURL string
		capacity              bool
	}{
		{"", "wharf", "loops", "https://crucible-authn-webhook.crucible.svc:9443/authenticate", false},
		{"ci/dock-values.yaml", "dock", "gpu-loops", "https://10.96.0.20:9443/authenticate", true},
	} {
		t.Run(tc.spoke, func(t *testing.T) {
			args := chartCase{chart: "crucible-spoke", values: tc.values}.args()
			_, objs := helmTemplate(t, "crucible-spoke", "crucible", args...)
			entry := profile.ClusterEntry{Name: tc.spoke, LoopNamespace: tc.ns, Capacity: tc.capacity}
			wantChartRBAC(t, "chart RBAC and loop namespace vs render spoke", objs, append(render.SpokeRBAC(entry, controllerUser), render.LoopNamespace(entry))...)

			trust := render.HubTrust{
				Issuer: devstack.Issuer, DiscoveryURL: "https://crucible-ext.hub.example.com/.well-known/openid-configuration",
				Audience: tc.spoke, AllowedSubjects: []string{devstack.HubSubject}, UsernamePrefix: "hub:",
			}
			wantCfg, err := render.WebhookConfig(trust)
			if err != nil {
				t.Fatal(err)
			}
			var wantMap, gotMap map[string]any
			mustYAML(t, wantCfg, &wantMap)
			gotMap = chartWebhookConfig(t, objs)
			if diff := cmp.Diff(wantMap, gotMap, dropEmptyMaps); diff != "" {
				t.Errorf("webhook config vs render spoke --authn webhook (-render +chart):\n%s", diff)
			}

			wantKC, err := render.WebhookKubeconfig(render.WebhookClient{URL: tc.webhookURL, CAFile: "/etc/crucible/webhook-ca.crt",
				ClientCertFile: "/etc/crucible/webhook-client.crt", ClientKeyFile: "/etc/crucible/webhook-client.key"})
			if err != nil {
				t.Fatal(err)
			}
			wantConfig, err := clientcmd.Load(wantKC)
			if err != nil {
				t.Fatal(err)
			}
			gotConfig, err := clientcmd.Load([]byte(configMapData(t, objs, "crucible-apiserver-webhook-kubeconfig", "webhook.kubeconfig")))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(wantConfig, gotConfig, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("apiserver kubeconfig vs render spoke --authn webhook-kubeconfig (-render +chart):\n%s", diff)
			}
		})
	}
}

// renderedObjects decodes render's YAML as helm's output is decoded.
// wantChartRBAC: the chart's RBAC and Namespace objects among objs are
// exactly render's (what names the comparison in the failure).
// webhookAppName labels the objects of the spoke chart's webhook.
const webhookAppName = "crucible-authn-webhook"

// chartWebhookConfig is the spoke chart's webhook configuration without
// the settings only the chart sets (render spoke leaves them at the
// webhook's defaults), after checking that they are those defaults.
func chartWebhookConfig(t *testing.T, objs []*unstructured.Unstructured) map[string]any {
	t.Helper()
	var cfg map[string]any
	mustYAML(t, []byte(configMapData(t, objs, "crucible-authn-webhook", "webhook.yaml")), &cfg)
	if cfg["jwksMinRefreshInterval"] != "10s" {
		t.Errorf("jwksMinRefreshInterval = %v, want 10s", cfg["jwksMinRefreshInterval"])
	}
	delete(cfg, "jwksMinRefreshInterval")
	providers, _ := cfg["providers"].([]any)
	for i, p := range providers {
		provider, _ := p.(map[string]any)
		if provider["maxKeyAge"] != "24h" {
			t.Errorf("providers[%d].maxKeyAge = %v, want 24h", i, provider["maxKeyAge"])
		}
		delete(provider, "maxKeyAge")
	}
	return cfg
}

func wantChartRBAC(t *testing.T, what string, objs []*unstructured.Unstructured, rendered ...runtime.Object) {
	t.Helper()
	want := renderedObjects(t, rendered...)
	var got []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetLabels()["app.kubernetes.io/name"] == webhookAppName {
			continue // the webhook's own, the chart's alone: TestHelmSpokeWebhookState
		}
		if strings.HasPrefix(o.GetAPIVersion(), "rbac.authorization.k8s.io/") || o.GetKind() == "Namespace" {
			got = append(got, o)
		}
	}
	sortObjects(want)
	sortObjects(got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s (-render +chart):\n%s", what, diff)
	}
}

func renderedObjects(t *testing.T, objs ...runtime.Object) []*unstructured.Unstructured {
	t.Helper()
	out, err := render.YAML(objs...)
	if err != nil {
		t.Fatal(err)
	}
	return decodeObjects(t, string(out))
}

// sortObjects orders objects by kind, namespace and name: helm orders them
// by kind for installation, render in its own apply order.
func sortObjects(objs []*unstructured.Unstructured) {
	key := func(o *unstructured.Unstructured) string {
		return o.GetKind() + "/" + o.GetNamespace() + "/" + o.GetName()
	}
	slices.SortFunc(objs, func(a, b *unstructured.Unstructured) int { return strings.Compare(key(a), key(b)) })
}

// dropEmptyMaps ignores members whose value is an empty object: render
// prints Go zero structs ("groups: {}"), which mean the same as none.
var dropEmptyMaps = cmpopts.IgnoreMapEntries(func(_ string, v any) bool {
	m, ok := v.(map[string]any)
	return ok && len(m) == 0
})

func mustYAML(t *testing.T, data []byte, v any) {
	t.Helper()
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("decode %s: %v", data, err)
	}
}

// The hub chart's profile passes the controller's strict profile loader, and
// every cluster's token_file and ca_file are what the Deployment mounts: a
// projected service-account token with the spoke's audience and lifetime,
// and the spoke's CA bundle.
func TestHelmHubChartProfile(t *testing.T) {
	override := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(override, []byte(`spokes:
- {name: wharf, server: "https://10.0.0.1:6443", caBundle: "", loopNamespace: loops, turnServiceAccount: turn,
   ingestAudience: ingest, audience: wharf.example.com, tokenExpirationSeconds: 900, qps: 5, burst: 10}
profileExtra: |
  [reconcile]
  sweep_interval = "30s"
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		args     []string
		spokes   map[string][2]any // name -> audience, expirationSeconds
		postgres bool
	}{
		{"defaults", nil, map[string][2]any{"wharf": {"wharf", int64(3600)}}, false},
		{"two spokes", chartCase{chart: "crucible-hub", values: "ci/two-spokes-values.yaml"}.args(),
			map[string][2]any{"wharf": {"wharf", int64(3600)}, "dock": {"dock", int64(7200)}}, true},
		{"audience override", []string{"-f", override}, map[string][2]any{"wharf": {"wharf.example.com", int64(900)}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, objs := helmTemplate(t, "crucible-hub", "crucible", tc.args...)
			p, err := profile.Parse([]byte(configMapData(t, objs, "crucible-profile", "crucible.toml")))
			if err != nil {
				t.Fatalf("the controller refuses the chart's profile: %v", err)
			}
			for _, c := range p.Clusters {
				wantLive, wantPorts := false, []int{profile.DefaultRunLivePort}
				if tc.name == "two spokes" && c.Name == "dock" {
					wantLive, wantPorts = true, []int{7777, 8888}
				}
				if c.RunLive != wantLive || !slices.Equal(c.RunLivePorts, wantPorts) {
					t.Errorf("%s: run_live %v ports %v, want %v %v", c.Name, c.RunLive, c.RunLivePorts, wantLive, wantPorts)
				}
				if wantCapacity := tc.name == "two spokes" && c.Name == "dock"; c.Capacity != wantCapacity {
					t.Errorf("%s: capacity %v, want %v", c.Name, c.Capacity, wantCapacity)
				}
			}
			if tc.name == "audience override" && p.Reconcile.SweepInterval.Duration != 30*time.Second {
				t.Errorf("profileExtra's sweep_interval not applied: %v", p.Reconcile.SweepInterval)
			}
			if got := strings.HasPrefix(p.Controller.Store, "postgres://"); got != tc.postgres {
				t.Errorf("store %q, want postgres %v", p.Controller.Store, tc.postgres)
			}
			var pod corev1.PodTemplateSpec
			tmpl, _, _ := unstructured.NestedMap(find(t, objs, "Deployment", "crucible-controller").Object, "spec", "template")
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(tmpl, &pod); err != nil {
				t.Fatal(err)
			}
			if len(p.Clusters) != len(tc.spokes) {
				t.Fatalf("profile has %d clusters, want %d", len(p.Clusters), len(tc.spokes))
			}
			casData, _, _ := unstructured.NestedStringMap(find(t, objs, "ConfigMap", "crucible-spoke-cas").Object, "data")
			for _, c := range p.Clusters {
				want, ok := tc.spokes[c.Name]
				if !ok {
					t.Fatalf("unexpected cluster %s", c.Name)
				}
				vol := mountedVolume(t, pod, filepath.Dir(c.TokenFile))
				if vol.Projected == nil || len(vol.Projected.Sources) != 1 || vol.Projected.Sources[0].ServiceAccountToken == nil {
					t.Fatalf("%s: token_file %s is not a projected token: %+v", c.Name, c.TokenFile, vol)
				}
				sat := vol.Projected.Sources[0].ServiceAccountToken
				got := [2]any{sat.Audience, *sat.ExpirationSeconds}
				if got != want || sat.Path != filepath.Base(c.TokenFile) {
					t.Errorf("%s: token %v at %s, want %v at %s", c.Name, got, sat.Path, want, filepath.Base(c.TokenFile))
				}
				caVol := mountedVolume(t, pod, "/etc/crucible/spokes")
				item := corev1.KeyToPath{Key: c.Name + ".crt", Path: c.Name + "/ca.crt"}
				if caVol.ConfigMap == nil || !slices.Contains(caVol.ConfigMap.Items, item) || c.CAFile != "/etc/crucible/spokes/"+item.Path {
					t.Errorf("%s: ca_file %s not mounted from crucible-spoke-cas", c.Name, c.CAFile)
				}
				if _, ok := casData[item.Key]; !ok {
					t.Errorf("%s: crucible-spoke-cas has no %s", c.Name, item.Key)
				}
			}
			args := pod.Spec.Containers[0].Args
			if got := slices.Contains(args, "--leader-elect"); got != tc.postgres {
				t.Errorf("args %v: --leader-elect %v, want %v", args, got, tc.postgres)
			}
			if tc.postgres != (len(pod.Spec.Containers[0].EnvFrom) == 1) {
				t.Errorf("envFrom %v with postgres %v", pod.Spec.Containers[0].EnvFrom, tc.postgres)
			}
			if sc := pod.Spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || *sc.RunAsUser != 65532 {
				t.Errorf("pod security context %+v", sc)
			}
		})
	}
}

// mountedVolume is the controller container's volume mounted at path.
func mountedVolume(t *testing.T, pod corev1.PodTemplateSpec, path string) corev1.Volume {
	t.Helper()
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		if m.MountPath != path {
			continue
		}
		for _, v := range pod.Spec.Volumes {
			if v.Name == m.Name {
				return v
			}
		}
	}
	t.Fatalf("nothing mounted at %s", path)
	return corev1.Volume{}
}

// The hub chart's Ingresses route exactly the mirror's two documents and the
// drop-box's prefix, all to the external Service, and only the drop-box's
// carries the ingress controller's per-client rate limit (ADR-0048 §2). The
// defaults create none: they need ingest.trustedProxies.
func TestHelmHubIngressExposesOnlyTheExternalRoute(t *testing.T) {
	_, defaults := helmTemplate(t, "crucible-hub", "crucible")
	for _, o := range defaults {
		if o.GetKind() == "Ingress" {
			t.Errorf("defaults render Ingress %s", o.GetName())
		}
	}
	_, objs := helmTemplate(t, "crucible-hub", "crucible", chartCase{chart: "crucible-hub", values: "ci/two-spokes-values.yaml"}.args()...)
	routes := func(name string) []string {
		rules, _, _ := unstructured.NestedSlice(find(t, objs, "Ingress", name).Object, "spec", "rules")
		var got []string
		for _, rule := range rules {
			ps, _, _ := unstructured.NestedSlice(rule.(map[string]any), "http", "paths")
			for _, p := range ps {
				p := p.(map[string]any)
				svc, _, _ := unstructured.NestedString(p, "backend", "service", "name")
				got = append(got, p["pathType"].(string)+" "+p["path"].(string)+" -> "+svc)
			}
		}
		return got
	}
	if diff := cmp.Diff([]string{
		"Exact /.well-known/openid-configuration -> crucible-external",
		"Exact /openid/v1/jwks -> crucible-external",
	}, routes("crucible-external")); diff != "" {
		t.Errorf("crucible-external paths (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"Prefix /api/pods/ -> crucible-external"}, routes("crucible-dropbox")); diff != "" {
		t.Errorf("crucible-dropbox paths (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{
		"nginx.ingress.kubernetes.io/limit-rps":              "50",
		"nginx.ingress.kubernetes.io/limit-burst-multiplier": "5",
		"nginx.ingress.kubernetes.io/limit-connections":      "50",
	}, find(t, objs, "Ingress", "crucible-dropbox").GetAnnotations()); diff != "" {
		t.Errorf("crucible-dropbox annotations (-want +got):\n%s", diff)
	}
	if a := find(t, objs, "Ingress", "crucible-external").GetAnnotations(); len(a) != 0 {
		t.Errorf("crucible-external has annotations %v, want none", a)
	}
}

// The hub chart's NetworkPolicy admits each listener's peers only: the
// ingress controller to the external port, the SSO proxy (auth "proxy") or
// the ingress controller (auth "kubernetes") to the internal one,
// Prometheus to metrics.
func TestHelmHubNetworkPolicy(t *testing.T) {
	for _, tc := range []struct {
		name         string
		args         []string
		internalFrom string // the app.kubernetes.io/name the internal port admits
	}{
		{"kubernetes", nil, "ingress-nginx"},
		{"proxy", []string{"--set", "api.auth=proxy,api.proxyCIDRs={10.0.0.0/24},api.proxyClientCA.secretName=ca,api.proxyClientNames={oauth2-proxy}"}, "oauth2-proxy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, objs := helmTemplate(t, "crucible-hub", "crucible", tc.args...)
			rules, _, _ := unstructured.NestedSlice(find(t, objs, "NetworkPolicy", "crucible-controller").Object, "spec", "ingress")
			got := map[string][]string{}
			for _, r := range rules {
				r := r.(map[string]any)
				ports, _ := r["ports"].([]any)
				from, _ := r["from"].([]any)
				for _, p := range ports {
					port := p.(map[string]any)["port"].(string)
					for _, f := range from {
						name, _, _ := unstructured.NestedString(f.(map[string]any), "podSelector", "matchLabels", "app.kubernetes.io/name")
						got[port] = append(got[port], name)
					}
				}
			}
			want := map[string][]string{"external": {"ingress-nginx"}, "internal": {tc.internalFrom}, "metrics": {"prometheus"}}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("peers by port (-want +got):\n%s", diff)
			}
		})
	}
}

// kubectl apply --dry-run=server accepts every object of both charts, with
// defaults and with the two-spoke values, on the dev stack's real hub and
// spoke API servers.
func TestHelmChartsDryRunServer(t *testing.T) {
	s := sharedStack(t)
	targets := map[string]*devstack.Cluster{
		"hub defaults": s.Hub, "hub two spokes": s.Hub, "hub pod classes": s.Hub,
		"spoke defaults": s.Spoke("wharf"), "spoke dock": s.Spoke("dock"),
	}
	for _, c := range chartCases {
		t.Run(c.name, func(t *testing.T) {
			cluster := targets[c.name]
			ns := devstack.HubNamespace // exists on the hub
			if cluster != s.Hub {
				ns = "crucible-authn"
			}
			stream, objs := helmTemplate(t, c.chart, ns, c.args()...)
			ensureNamespace(t, cluster, ns)
			for _, o := range objs {
				if o.GetNamespace() != "" {
					ensureNamespace(t, cluster, o.GetNamespace())
				}
			}
			file := filepath.Join(t.TempDir(), "objects.yaml")
			if err := os.WriteFile(file, []byte(stream), 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := kubectl(t, cluster.KubeconfigFile, "apply", "--dry-run=server", "-f", file)
			if err != nil {
				t.Fatalf("kubectl apply --dry-run=server: %v\n%s", err, out)
			}
			if n := strings.Count(out, "(server dry run)"); n != len(objs) {
				t.Errorf("%d of %d objects accepted:\n%s", n, len(objs), out)
			}
		})
	}
}

// ensureNamespace creates namespace on c unless it exists, and deletes it
// when the test ends if it created it.
func ensureNamespace(t testing.TB, c *devstack.Cluster, name string) {
	t.Helper()
	_, err := c.Client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
	case err != nil:
		t.Fatal(err)
	default:
		t.Cleanup(func() { // t.Context() is done by now
			_ = c.Client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
}

// api.auth renders the profile's [api] table (R-C12) with the internal
// Service's names allowed as Host: "kubernetes" by default (the controller
// refuses "none" off loopback); set empty, no [api] table at all.
func TestHelmHubAPIAuth(t *testing.T) {
	_, objs := helmTemplate(t, "crucible-hub", "hub-ns")
	var byDefault struct {
		API map[string]any `toml:"api"`
	}
	if _, err := toml.Decode(configMapData(t, objs, "crucible-profile", "crucible.toml"), &byDefault); err != nil {
		t.Fatal(err)
	}
	if byDefault.API["auth"] != "kubernetes" {
		t.Errorf("default [api] auth = %v, want kubernetes", byDefault.API["auth"])
	}
	_, objs = helmTemplate(t, "crucible-hub", "hub-ns", "--set", "api.auth=")
	if profile := configMapData(t, objs, "crucible-profile", "crucible.toml"); strings.Contains(profile, "[api]") {
		t.Errorf("api.auth empty: profile has [api]:\n%s", profile)
	}
	_, objs = helmTemplate(t, "crucible-hub", "hub-ns", "--set", "api.auth=proxy", "--set", "api.proxyCIDRs={10.1.0.0/16}",
		"--set", "api.allowedHosts={crucible.example.com}", "--set", "api.proxyClientCA.configMapName=proxy-ca",
		"--set", "api.proxyClientNames={oauth2-proxy,sso.example}")
	var profile struct {
		API map[string]any `toml:"api"`
	}
	if _, err := toml.Decode(configMapData(t, objs, "crucible-profile", "crucible.toml"), &profile); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"auth": "proxy", "namespace": "hub-ns", "proxy_cidrs": []any{"10.1.0.0/16"},
		"allowed_hosts": []any{"localhost", "127.0.0.1", "::1", "crucible-internal", "crucible-internal.hub-ns",
			"crucible-internal.hub-ns.svc", "crucible.example.com"},
		"proxy_client_ca": "/etc/crucible/proxy-client-ca/ca.crt", "proxy_client_names": []any{"oauth2-proxy", "sso.example"},
	}
	if diff := cmp.Diff(want, profile.API); diff != "" {
		t.Errorf("[api] (-want +got):\n%s", diff)
	}
}

// The spoke chart spreads its webhook replicas over nodes by default (a
// preferred anti-affinity on its own pods), and an affinity in the values
// replaces that default rather than merging with it.
func TestHelmSpokeWebhookSpreadsOverNodes(t *testing.T) {
	_, objs := helmTemplate(t, "crucible-spoke", "crucible-authn")
	dep := find(t, objs, "Deployment", "crucible-authn-webhook")
	terms, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "affinity", "podAntiAffinity", "preferredDuringSchedulingIgnoredDuringExecution")
	if len(terms) != 1 {
		t.Fatalf("default affinity has %d preferred anti-affinity terms, want 1: %v", len(terms), terms)
	}
	term := terms[0].(map[string]any)
	key, _, _ := unstructured.NestedString(term, "podAffinityTerm", "topologyKey")
	sel, _, _ := unstructured.NestedStringMap(term, "podAffinityTerm", "labelSelector", "matchLabels")
	podSel, _, _ := unstructured.NestedStringMap(dep.Object, "spec", "selector", "matchLabels")
	if key != "kubernetes.io/hostname" || len(sel) == 0 || !cmp.Equal(sel, podSel) {
		t.Errorf("anti-affinity on %q over %v, want kubernetes.io/hostname over the Deployment's selector %v", key, sel, podSel)
	}

	_, objs = helmTemplate(t, "crucible-spoke", "crucible-authn", "--set", "webhook.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=node-role.kubernetes.io/control-plane",
		"--set", "webhook.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists")
	affinity, _, _ := unstructured.NestedMap(find(t, objs, "Deployment", "crucible-authn-webhook").Object, "spec", "template", "spec", "affinity")
	if _, anti := affinity["podAntiAffinity"]; anti || affinity["nodeAffinity"] == nil {
		t.Errorf("affinity from the values = %v, want the values' nodeAffinity alone", affinity)
	}
}

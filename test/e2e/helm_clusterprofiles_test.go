package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	cpv1alpha1 "sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"
	"sigs.k8s.io/cluster-inventory-api/pkg/credentials"
	"sigs.k8s.io/yaml"

	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/render"
)

// clusterProfilesValuesFile writes chart values to a file of the test's.
func clusterProfilesValuesFile(t *testing.T, values string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(path, []byte(values), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// chartProfileFile is the profile the chart renders (ConfigMap
// crucible-profile), with each ca_file moved to a file of the test's that
// holds what the chart's crucible-spoke-cas mounts there: the profile a
// user without Helm would give render clusterprofile for the same spokes.
func chartProfileFile(t *testing.T, objs []*unstructured.Unstructured) string {
	t.Helper()
	dir := t.TempDir()
	profile := configMapData(t, objs, "crucible-profile", "crucible.toml")
	cas, _, _ := unstructured.NestedStringMap(find(t, objs, "ConfigMap", "crucible-spoke-cas").Object, "data")
	for key, pem := range cas {
		name := strings.TrimSuffix(key, ".crt")
		file := filepath.Join(dir, name+"-ca.crt")
		if err := os.WriteFile(file, []byte(pem), 0o600); err != nil {
			t.Fatal(err)
		}
		profile = strings.ReplaceAll(profile, "/etc/crucible/spokes/"+name+"/ca.crt", file)
	}
	path := filepath.Join(dir, "crucible.toml")
	if err := os.WriteFile(path, []byte(profile), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// chartObjectsOfKind is the objects of kind, sorted as sortObjects sorts them.
func chartObjectsOfKind(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	sortObjects(out)
	return out
}

// realCAValues are values giving both spokes of ci/two-spokes-values.yaml a
// CA that parses (the file's are placeholders): the server pins carry it.
func realCAValues(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("spokes:\n")
	for _, name := range []string{"wharf", "dock"} {
		ca := selfSignedCA(t, name)
		fmt.Fprintf(&b, "- name: %s\n  server: https://api.%s.example.com:6443\n  caBundle: %q\n  loopNamespace: loops\n  turnServiceAccount: crucible-turn\n  ingestAudience: crucible-ingest\n", name, name, ca)
	}
	return clusterProfilesValuesFile(t, b.String())
}

// selfSignedCA is a CA certificate's PEM, for values that must parse.
func selfSignedCA(t *testing.T, name string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// With clusterProfiles.enabled the hub chart installs, per entry of spokes,
// the ClusterProfile `crucible render clusterprofile` prints for the
// chart's own profile (object for object, status included: the audience a
// spoke overrides joins its extension), and the ConfigMap
// crucible-clusterprofile-providers whose providers.json and
// server-pins.json are byte for byte what `render clusterprofile
// --provider-file` and `--server-pins` print for the same values (the
// command escaped as Go's JSON escapes it).
func TestHelmClusterProfilesMatchRender(t *testing.T) {
	twoSpokes := chartCase{chart: "crucible-hub", values: "ci/two-spokes-values.yaml"}.args()
	for _, tc := range []struct {
		name, values           string
		namespace              string
		renderArgs, renderFile []string
	}{
		{
			name: "defaults", values: "clusterProfiles: {enabled: true}\n", namespace: "hub-ns",
			renderArgs: []string{"--namespace", "hub-ns"},
			renderFile: []string{"--command", "/var/run/crucible/bin/crucible"},
		},
		{
			name: "every value",
			values: `clusterProfiles: {enabled: true, namespace: kueue-system, providerName: crucible-prod,
  command: "/opt/a<b>&c/crucible", clusterManager: fleet.example.com}
`,
			namespace:  "kueue-system",
			renderArgs: []string{"--namespace", "kueue-system", "--provider-name", "crucible-prod", "--cluster-manager", "fleet.example.com"},
			renderFile: []string{"--provider-name", "crucible-prod", "--command", "/opt/a<b>&c/crucible"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string{}, twoSpokes...), "-f", realCAValues(t), "-f", clusterProfilesValuesFile(t, tc.values), "--set", "spokes[1].audience=https://dock.example.com")
			_, objs := helmTemplate(t, "crucible-hub", "hub-ns", args...)
			chart := chartObjectsOfKind(objs, "ClusterProfile")
			if len(chart) != 2 {
				t.Fatalf("chart renders %d ClusterProfiles; want one per spoke (2)", len(chart))
			}

			profile := chartProfileFile(t, objs)
			out := crucibleOutput(t, append([]string{"render", "clusterprofile", "--config", profile, "--audience", "dock=https://dock.example.com"}, tc.renderArgs...)...)
			rendered := decodeObjects(t, string(out))
			sortObjects(rendered)
			if diff := cmp.Diff(rendered, chart); diff != "" {
				t.Errorf("ClusterProfiles of render clusterprofile (-) and of the chart (+):\n%s", diff)
			}
			var dock cpv1alpha1.ClusterProfile
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(chart[0].Object, &dock); err != nil {
				t.Fatal(err)
			}
			if got := string(dock.Status.AccessProviders[0].Cluster.Extensions[0].Extension.Raw); got != `{"audience":"https://dock.example.com","cluster":"dock"}` {
				t.Errorf("%s's exec extension %s lacks its audience override", dock.Name, got)
			}

			wantFile := crucibleOutput(t, append([]string{"render", "clusterprofile", "--provider-file"}, tc.renderFile...)...)
			if got := configMapData(t, objs, render.ProvidersConfigMap, render.ProvidersKey); got != string(wantFile) {
				t.Errorf("providers.json differs from render --provider-file:\nchart:\n%q\nrender:\n%q", got, wantFile)
			}
			wantPins := crucibleOutput(t, "render", "clusterprofile", "--server-pins", "--config", profile, "--audience", "dock=https://dock.example.com")
			if got := configMapData(t, objs, render.ProvidersConfigMap, render.ServerPinsKey); got != string(wantPins) {
				t.Errorf("server-pins.json differs from render --server-pins:\nchart:\n%s\nrender:\n%s", got, wantPins)
			}
			if ns := find(t, objs, "ConfigMap", render.ProvidersConfigMap).GetNamespace(); ns != tc.namespace {
				t.Errorf("ConfigMap %s in %q; want the ClusterProfiles' %q", render.ProvidersConfigMap, ns, tc.namespace)
			}
		})
	}
}

// Disabled (the default), the chart installs neither ClusterProfiles nor
// the provider ConfigMap: a hub without the CRD installs as before.
func TestHelmClusterProfilesDisabled(t *testing.T) {
	for _, c := range chartCases {
		if c.chart != "crucible-hub" {
			continue
		}
		_, objs := helmTemplate(t, c.chart, "crucible", c.args()...)
		for _, o := range objs {
			if o.GetKind() == "ClusterProfile" || o.GetName() == render.ProvidersConfigMap {
				t.Errorf("%s: renders %s %s", c.name, o.GetKind(), o.GetName())
			}
		}
	}
}

// The schema refuses bad clusterProfiles values with the key's path, and
// takes exactly the commands render takes: neither could print a provider
// file the other would not.
func TestHelmClusterProfilesRefusesBadValues(t *testing.T) {
	for _, tc := range []struct{ set, want string }{
		{"clusterProfiles.enabled=true,clusterProfiles.providerName=", "at '/clusterProfiles/providerName'"},
		{"clusterProfiles.enabled=true,clusterProfiles.providerName=Crucible", "at '/clusterProfiles/providerName'"},
		{"clusterProfiles.enabled=true,clusterProfiles.namespace=Kueue_System", "at '/clusterProfiles/namespace'"},
		{"clusterProfiles.enabled=true,clusterProfiles.clusterManager=a/b", "at '/clusterProfiles/clusterManager'"},
		{"clusterProfiles.enabled=true,clusterProfiles.clusterManager=", "at '/clusterProfiles/clusterManager'"},
		{"clusterProfiles.enable=true", "additional properties 'enable' not allowed"},
		{"clusterProfiles.enabled=yes", "at '/clusterProfiles/enabled'"},
	} {
		_, err := helm(t, "template", "crucible", chartDir("crucible-hub"), "--set", tc.set)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--set %s: %v; want an error containing %q", tc.set, err, tc.want)
		}
	}
	for _, tc := range []struct {
		command string
		ok      bool
	}{
		{"crucible", true},
		{"/var/run/crucible/bin/crucible", true},
		{"/opt/.crucible/...bin/crucible", true},
		{"", false},
		{"bin/crucible", false},
		{"/opt/../crucible", false},
		{"/opt/./crucible", false},
		{"/opt//crucible", false},
		{"/opt/bin/", false},
		{"/", false},
		{"..", false},
		{"/opt/my crucible", false},
	} {
		_, err := helm(t, "template", "crucible", chartDir("crucible-hub"), "--set-json", fmt.Sprintf(`clusterProfiles={"enabled":true,"command":%q}`, tc.command))
		switch {
		case tc.ok && err != nil:
			t.Errorf("command %q refused: %v", tc.command, err)
		case !tc.ok && (err == nil || !strings.Contains(err.Error(), "at '/clusterProfiles/command'")):
			t.Errorf("command %q: %v; want a refusal at /clusterProfiles/command", tc.command, err)
		}
		if _, rerr := render.ProviderFile(render.AccessProviderName, tc.command, render.ServerPinsPath); (rerr == nil) != tc.ok {
			t.Errorf("command %q: chart ok %v, render says %v", tc.command, tc.ok, rerr)
		}
	}
}

// On the dev stack's hub, with the ClusterProfile CRD installed, every
// object of the chart with clusterProfiles.enabled passes kubectl apply
// --dry-run=server. Then the ClusterProfiles are applied for real, their
// status written as NOTES.txt says (the manifest, filtered
// by the cluster-manager label, through kubectl apply --server-side
// --subresource=status), and a consumer holding the chart's provider file
// reaches wharf through the chart's ClusterProfile as the federated
// identity whose token it mounts.
func TestHelmClusterProfilesOnTheHub(t *testing.T) {
	s := sharedStack(t)
	hub, err := dynamic.NewForConfig(s.Hub.Admin)
	if err != nil {
		t.Fatal(err)
	}
	installClusterProfileCRD(t, hub)
	const ns = "helm-clusterprofiles"
	hubNamespace(t, s, ns)
	stream, objs := helmTemplate(t, "crucible-hub", devstack.HubNamespace, "-f", clusterProfilesValuesFile(t, stackSpokesValues(t, s, ns)))
	file := filepath.Join(t.TempDir(), "manifest.yaml")
	if err := os.WriteFile(file, []byte(stream), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := kubectl(t, s.Hub.KubeconfigFile, "apply", "--dry-run=server", "-f", file)
	if err != nil {
		t.Fatalf("kubectl apply --dry-run=server: %v\n%s", err, out)
	}
	if n := strings.Count(out, "(server dry run)"); n != len(objs) {
		t.Errorf("%d of %d objects accepted:\n%s", n, len(objs), out)
	}

	// NOTES.txt's selector: the chart's ClusterProfiles, and nothing else of its manifest.
	selector := cpv1alpha1.LabelClusterManagerKey + "=" + render.ClusterManagerName
	out, err = kubectl(t, s.Hub.KubeconfigFile, "apply", "-l", selector, "-f", file)
	if err != nil {
		t.Fatalf("kubectl apply -l %s: %v\n%s", selector, err, out)
	}
	applied := strings.Fields(out)
	if diff := cmp.Diff([]string{"clusterprofile.multicluster.x-k8s.io/wharf", "created", "clusterprofile.multicluster.x-k8s.io/dock", "created"}, applied); diff != "" {
		t.Errorf("kubectl apply -l %s applied (-want +got):\n%s", selector, diff)
	}
	if out, err := kubectl(t, s.Hub.KubeconfigFile, "apply", "--server-side", "--subresource=status", "-l", selector, "-f", file); err != nil {
		t.Fatalf("kubectl apply --server-side --subresource=status: %v\n%s", err, out)
	}
	for _, name := range []string{"wharf", "dock"} {
		got := hubClusterProfile(t, hub, ns, name)
		want := renderClusterProfile(t, s, name, ns)
		if diff := cmp.Diff(want.Status, got.Status, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s: status on the hub vs render clusterprofile (-render +hub):\n%s", name, diff)
		}
	}

	tokenDir := t.TempDir()
	if err := os.Mkdir(filepath.Join(tokenDir, "wharf"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(s.Federation.SpokeTokenFiles["wharf"], filepath.Join(tokenDir, "wharf", "token")); err != nil {
		t.Fatal(err)
	}
	providers := chartProviders(t, configMapData(t, objs, render.ProvidersConfigMap, render.ProvidersKey),
		configMapData(t, objs, render.ProvidersConfigMap, render.ServerPinsKey), tokenDir)
	cfg, err := providers.BuildConfigFromCP(hubClusterProfile(t, hub, ns, "wharf"))
	if err != nil {
		t.Fatalf("BuildConfigFromCP: %v", err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	review, err := client.AuthenticationV1().SelfSubjectReviews().Create(t.Context(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SelfSubjectReview on wharf through the chart's ClusterProfile: %v", err)
	}
	if got := review.Status.UserInfo.Username; got != controllerUser {
		t.Errorf("wharf sees the consumer as %q; want %q", got, controllerUser)
	}
}

// stackSpokesValues are hub chart values for the dev stack's spokes (their
// servers and CAs from the stack's profile), with clusterProfiles enabled
// in namespace and crucible as the binary under test.
func stackSpokesValues(t *testing.T, s *devstack.Stack, namespace string) string {
	t.Helper()
	p, err := profile.Load(s.Federation.ProfileFile)
	if err != nil {
		t.Fatal(err)
	}
	var spokes []map[string]any
	for _, c := range p.Clusters {
		ca, err := os.ReadFile(c.CAFile)
		if err != nil {
			t.Fatal(err)
		}
		spokes = append(spokes, map[string]any{
			"name": c.Name, "server": c.Server, "caBundle": string(ca),
			"loopNamespace": c.LoopNamespace, "turnServiceAccount": c.TurnServiceAccount, "ingestAudience": c.IngestAudience,
		})
	}
	values, err := yaml.Marshal(map[string]any{
		"spokes":          spokes,
		"clusterProfiles": map[string]any{"enabled": true, "namespace": namespace, "command": devstacktest.CrucibleBinary(t)},
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(values)
}

// hubClusterProfile is what the hub holds of ClusterProfile ns/name.
func hubClusterProfile(t *testing.T, hub dynamic.Interface, ns, name string) *cpv1alpha1.ClusterProfile {
	t.Helper()
	u, err := hub.Resource(cpResource).Namespace(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var cp cpv1alpha1.ClusterProfile
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &cp); err != nil {
		t.Fatal(err)
	}
	return &cp
}

// chartProviders is the chart's providers.json as the credentials library
// reads it, with CRUCIBLE_TOKEN_DIR added to the exec env where the
// consumer values would set it on the container, and --server-pins pointed
// at a file holding the chart's server-pins.json (the pod mounts it at
// render.ServerPinsPath).
func chartProviders(t *testing.T, providersJSON, pinsJSON, tokenDir string) *credentials.CredentialsProvider {
	t.Helper()
	file := withTokenDir(t, "chart's providers.json", []byte(providersJSON), tokenDir)
	args := file.Providers[0].ExecConfig.Args
	if diff := cmp.Diff([]string{"credential", "--server-pins", render.ServerPinsPath}, args); diff != "" {
		t.Fatalf("chart's provider args (-want +got):\n%s", diff)
	}
	pins := filepath.Join(t.TempDir(), render.ServerPinsKey)
	if err := os.WriteFile(pins, []byte(pinsJSON), 0o600); err != nil {
		t.Fatal(err)
	}
	args[2] = pins
	return loadProviders(t, file)
}

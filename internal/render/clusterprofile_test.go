package render

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/cluster-inventory-api/pkg/credentials"
)

// The rendered ClusterProfile prints as the object the issue specifies,
// with its status (the part kubectl apply leaves out) kept in the YAML.
func TestClusterProfileYAML(t *testing.T) {
	c := AccessCluster{Name: "wharf", Server: "https://api.wharf.example.com:6443", CAPEM: []byte("PEM")}
	cp, err := ClusterProfile(c, defaultProfileOptions("kueue-system"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := YAML(cp)
	if err != nil {
		t.Fatal(err)
	}
	want := `apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ClusterProfile
metadata:
  labels:
    app.kubernetes.io/managed-by: crucible
    x-k8s.io/cluster-manager: crucible
  name: wharf
  namespace: kueue-system
spec:
  clusterManager:
    name: crucible
  displayName: wharf
status:
  accessProviders:
  - cluster:
      certificate-authority-data: UEVN
      extensions:
      - extension:
          cluster: wharf
        name: client.authentication.k8s.io/exec
      server: https://api.wharf.example.com:6443
    name: crucible
  conditions: []
  version: {}
`
	if diff := cmp.Diff(want, string(out)); diff != "" {
		t.Errorf("YAML (-want +got):\n%s", diff)
	}
}

// defaultProfileOptions are the CLI's defaults in namespace.
func defaultProfileOptions(namespace string) ProfileOptions {
	return ProfileOptions{Namespace: namespace, Provider: AccessProviderName, ClusterManager: ClusterManagerName}
}

// The options name the provider and the manager in every place they
// appear, and an audience other than the spoke's name joins the extension
// (credential checks that one); the spoke's own name as audience does not.
func TestClusterProfileOptionsAndAudience(t *testing.T) {
	o := ProfileOptions{Namespace: "inventory", Provider: "crucible-prod", ClusterManager: "fleet.example.com"}
	for _, tc := range []struct {
		audience, wantExt string
	}{
		{"", `{"cluster":"dock"}`},
		{"dock", `{"cluster":"dock"}`},
		{"https://dock.example.com", `{"cluster":"dock","audience":"https://dock.example.com"}`},
	} {
		cp, err := ClusterProfile(AccessCluster{Name: "dock", Server: "https://dock:6443", Audience: tc.audience}, o)
		if err != nil {
			t.Fatal(err)
		}
		ap := cp.Status.AccessProviders
		got := []string{cp.Namespace, cp.Labels["x-k8s.io/cluster-manager"], cp.Spec.ClusterManager.Name, ap[0].Name, string(ap[0].Cluster.Extensions[0].Extension.Raw)}
		want := []string{"inventory", "fleet.example.com", "fleet.example.com", "crucible-prod", tc.wantExt}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("audience %q (-want +got):\n%s", tc.audience, diff)
		}
	}
}

// Every refusal names the value at fault: a server the consumer would send
// the token to in the clear or nowhere, a name credential would refuse, and
// options the API server would refuse one object at a time.
func TestClusterProfileRefusals(t *testing.T) {
	good := AccessCluster{Name: "wharf", Server: "https://api.wharf:6443"}
	for _, tc := range []struct {
		name string
		c    AccessCluster
		o    ProfileOptions
		want []string
	}{
		{"no server", AccessCluster{Name: "wharf"}, defaultProfileOptions("ns"), []string{`cluster wharf: server ""`}},
		{"http", AccessCluster{Name: "wharf", Server: "http://api.wharf:6443"}, defaultProfileOptions("ns"), []string{"cluster wharf: server", "want an https URL"}},
		{"no host", AccessCluster{Name: "wharf", Server: "https://"}, defaultProfileOptions("ns"), []string{`server "https://"`}},
		{"no scheme", AccessCluster{Name: "wharf", Server: "api.wharf:6443"}, defaultProfileOptions("ns"), []string{`server "api.wharf:6443"`}},
		{"name", AccessCluster{Name: "Wharf", Server: "https://api.wharf:6443"}, defaultProfileOptions("ns"), []string{`cluster "Wharf"`}},
		{"audience", AccessCluster{Name: "wharf", Server: "https://api.wharf:6443", Audience: " wharf"}, defaultProfileOptions("ns"), []string{`cluster wharf: audience " wharf"`}},
		{"every option at once", good, ProfileOptions{Namespace: "Kueue", Provider: "", ClusterManager: "a/b"},
			[]string{`namespace "Kueue"`, `provider name ""`, `cluster manager "a/b"`}},
		{"empty manager", good, ProfileOptions{Namespace: "ns", Provider: "crucible"}, []string{`cluster manager ""`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cp, err := ClusterProfile(tc.c, tc.o)
			if err == nil {
				t.Fatalf("rendered %+v; want a refusal", cp)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// The cluster-inventory-api credentials library, given the provider file
// and a ClusterProfile, builds the rest.Config crucible means: the
// spoke's server and CA, `crucible credential` with the cluster info, and
// the extension {"cluster": NAME} as the exec config client-go passes on.
func TestClusterProfileThroughCredentialsLibrary(t *testing.T) {
	file, err := ProviderFile(AccessProviderName, "/opt/crucible/bin/crucible", ServerPinsPath)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "providers.json")
	if err := os.WriteFile(path, file, 0o600); err != nil {
		t.Fatal(err)
	}
	providers, err := credentials.NewFromFile(path)
	if err != nil {
		t.Fatalf("NewFromFile: %v\n%s", err, file)
	}
	for _, name := range []string{"wharf", "dock"} {
		cp, err := ClusterProfile(AccessCluster{Name: name, Server: "https://" + name + ".example:6443", CAPEM: []byte("CA of " + name)}, defaultProfileOptions("ns"))
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := providers.BuildConfigFromCP(cp)
		if err != nil {
			t.Fatalf("%s: BuildConfigFromCP: %v", name, err)
		}
		exec := cfg.ExecProvider
		var ext string
		if u, ok := exec.Config.(*runtime.Unknown); ok {
			ext = string(u.Raw)
		}
		got := []any{cfg.Host, string(cfg.CAData), exec.APIVersion, exec.Command, exec.Args, exec.ProvideClusterInfo, exec.InteractiveMode, ext}
		want := []any{"https://" + name + ".example:6443", "CA of " + name, "client.authentication.k8s.io/v1", "/opt/crucible/bin/crucible",
			[]string{"credential", "--server-pins", "/etc/crucible/clusterprofile/server-pins.json"}, true, api.NeverExecInteractiveMode, `{"cluster":"` + name + `"}`}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: rest.Config (-want +got):\n%s", name, diff)
		}
	}
}

// The provider file runs what exec can run without a shell or a working
// directory: an absolute clean path or a bare name; anything else is
// refused with the value.
func TestClusterProfileProviderFileCommand(t *testing.T) {
	for _, tc := range []struct {
		command, want string // want "" means accepted
	}{
		{"crucible", ""},
		{"/var/run/crucible/bin/crucible", ""},
		{"/a<b>&c/crucible", ""},
		{"", "provider command: must not be empty"},
		{"bin/crucible", `provider command "bin/crucible": want an absolute path or a name`},
		{"..", `provider command "..": want an absolute path`},
		{"/opt//crucible", `provider command "/opt//crucible": want a clean absolute path`},
		{"/opt/../crucible", "want a clean absolute path"},
		{"/", "want a clean absolute path"},
		{"/opt/my crucible", "must not contain whitespace"},
		{"crucible\n", "must not contain whitespace"},
	} {
		out, err := ProviderFile(AccessProviderName, tc.command, ServerPinsPath)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("command %q: %v", tc.command, err)
		case tc.want == "":
			var file credentials.CredentialsProvider
			if err := json.Unmarshal(out, &file); err != nil || file.Providers[0].ExecConfig.Command != tc.command {
				t.Errorf("command %q: provider file %s (%v)", tc.command, out, err)
			}
		case err == nil || !strings.Contains(err.Error(), tc.want):
			t.Errorf("command %q: %v; want an error containing %q", tc.command, err, tc.want)
		}
	}
}

// The provider's name is the one the ClusterProfiles carry; a name the
// consumer's admin could not type back is refused.
func TestClusterProfileProviderFileName(t *testing.T) {
	out, err := ProviderFile("crucible-prod", "crucible", ServerPinsPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `"name": "crucible-prod"`) {
		t.Errorf("provider file %s does not name crucible-prod", out)
	}
	for _, name := range []string{"", "Crucible", "crucible prod", "a/b"} {
		if _, err := ProviderFile(name, "crucible", ServerPinsPath); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("provider name %q", name)) {
			t.Errorf("provider name %q: %v; want a refusal naming it", name, err)
		}
	}
}

// The provider passes the pins file's path to credential; a path that
// depends on the consumer's working directory is refused.
func TestClusterProfileProviderFilePinsPath(t *testing.T) {
	out, err := ProviderFile(AccessProviderName, "crucible", "/etc/pins/p.json")
	if err != nil {
		t.Fatal(err)
	}
	var file credentials.CredentialsProvider
	if err := json.Unmarshal(out, &file); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"credential", "--server-pins", "/etc/pins/p.json"}, file.Providers[0].ExecConfig.Args); diff != "" {
		t.Errorf("args (-want +got):\n%s", diff)
	}
	for _, bad := range []string{"", "pins.json", "/etc/../pins.json", "/etc//pins.json"} {
		if _, err := ProviderFile(AccessProviderName, "crucible", bad); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("server pins path %q", bad)) {
			t.Errorf("pins path %q: %v; want a refusal naming it", bad, err)
		}
	}
}

// The pins file holds, per spoke, exactly what credential checks: the
// server, the CA bytes and the audience written out (the name where none
// overrides it); a spoke that could not be pinned is refused.
func TestServerPinsFile(t *testing.T) {
	out, err := ServerPinsFile([]AccessCluster{
		{Name: "wharf", Server: "https://api.wharf:6443", CAPEM: []byte("-----BEGIN CERTIFICATE-----\nQ0E=\n-----END CERTIFICATE-----\n")},
		{Name: "dock", Server: "https://api.dock", Audience: "https://dock.example.com"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `{
  "clusters": [
    {
      "name": "wharf",
      "server": "https://api.wharf:6443",
      "certificate-authority-data": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tClEwRT0KLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo=",
      "audience": "wharf"
    },
    {
      "name": "dock",
      "server": "https://api.dock",
      "audience": "https://dock.example.com"
    }
  ]
}
`
	if diff := cmp.Diff(want, string(out)); diff != "" {
		t.Errorf("pins file (-want +got):\n%s", diff)
	}
	for _, tc := range []struct {
		clusters []AccessCluster
		want     string
	}{
		{nil, "no clusters"},
		{[]AccessCluster{{Name: "wharf", Server: "http://api.wharf"}}, `cluster wharf: server "http://api.wharf": want an https URL`},
		{[]AccessCluster{{Name: "Wharf", Server: "https://api.wharf"}}, `cluster "Wharf"`},
		{[]AccessCluster{{Name: "wharf", Server: "https://api.wharf", Audience: "wharf "}}, "leading or trailing whitespace"},
		{[]AccessCluster{{Name: "wharf", Server: "https://api.wharf", CAPEM: []byte("CA")}}, "cluster wharf: CA: not a PEM bundle of certificates"},
	} {
		if _, err := ServerPinsFile(tc.clusters); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v; want an error containing %q", tc.clusters, err, tc.want)
		}
	}
}

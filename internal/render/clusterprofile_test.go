package render

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/cluster-inventory-api/pkg/credentials"

	"crucible.dev/crucible/internal/fleet"
)

// The rendered ClusterProfile prints as the object the issue specifies,
// with its status (the part kubectl apply leaves out) kept in the YAML.
func TestClusterProfileYAML(t *testing.T) {
	c := fleet.ClusterEntry{Name: "wharf", Server: "https://api.wharf.example.com:6443"}
	cp, err := ClusterProfile(c, "kueue-system", []byte("PEM"))
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

// A server that is not an https URL is refused with the cluster's name:
// the consumer would otherwise send the token in the clear or nowhere.
func TestClusterProfileRefusesServer(t *testing.T) {
	for _, server := range []string{"", "http://api.wharf:6443", "https://", "api.wharf:6443"} {
		_, err := ClusterProfile(fleet.ClusterEntry{Name: "wharf", Server: server}, "ns", nil)
		if err == nil || !strings.Contains(err.Error(), "cluster wharf: server") {
			t.Errorf("server %q: %v; want a refusal naming cluster wharf's server", server, err)
		}
	}
}

// The cluster-inventory-api credentials library, given the provider file
// and a ClusterProfile, builds the rest.Config crucible means: the
// spoke's server and CA, `crucible credential` with the cluster info, and
// the extension {"cluster": NAME} as the exec config client-go passes on.
func TestClusterProfileThroughCredentialsLibrary(t *testing.T) {
	file, err := ProviderFile("/opt/crucible/bin/crucible")
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
		cp, err := ClusterProfile(fleet.ClusterEntry{Name: name, Server: "https://" + name + ".example:6443"}, "ns", []byte("CA of "+name))
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
			[]string{"credential"}, true, api.NeverExecInteractiveMode, `{"cluster":"` + name + `"}`}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: rest.Config (-want +got):\n%s", name, diff)
		}
	}
}

func TestClusterProfileProviderFileRefusesEmptyCommand(t *testing.T) {
	if _, err := ProviderFile(""); err == nil || !strings.Contains(err.Error(), "provider command") {
		t.Errorf("ProviderFile(\"\") = %v; want a refusal naming the command", err)
	}
}

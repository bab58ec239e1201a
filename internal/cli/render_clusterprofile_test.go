package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime"
	cpv1alpha1 "sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"
	cpcredentials "sigs.k8s.io/cluster-inventory-api/pkg/credentials"
	"sigs.k8s.io/yaml"
)

// clusterProfileFixture is the example profile with wharf's ca_file at a
// file that exists, holding caPEM.
func clusterProfileFixture(t *testing.T, caPEM string) string {
	t.Helper()
	dir := t.TempDir()
	ca := filepath.Join(dir, "wharf-ca.crt")
	if err := os.WriteFile(ca, []byte(caPEM), 0o600); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(exampleProfile)
	if err != nil {
		t.Fatal(err)
	}
	profile := strings.ReplaceAll(string(data), "/etc/crucible/wharf/ca.crt", ca)
	path := filepath.Join(dir, "crucible.toml")
	if err := os.WriteFile(path, []byte(profile), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// What render clusterprofile prints, read back by the consumer library with
// the provider file the same command prints, gives `crucible credential`
// an exec info whose spec.cluster.config names wharf and nothing else.
func TestRenderClusterProfileRoundTrip(t *testing.T) {
	profile := clusterProfileFixture(t, "-----BEGIN CERTIFICATE-----\nwharf\n-----END CERTIFICATE-----\n")
	var out, errOut bytes.Buffer
	if err := Run(t.Context(), []string{"render", "clusterprofile", "--config", profile, "--namespace", "kueue-system"}, &out, &errOut); err != nil {
		t.Fatalf("render: %v\n%s", err, errOut.String())
	}
	var cp cpv1alpha1.ClusterProfile
	if err := yaml.UnmarshalStrict(out.Bytes(), &cp); err != nil {
		t.Fatalf("decode %s: %v", out.String(), err)
	}
	out.Reset()
	if err := Run(t.Context(), []string{"render", "clusterprofile", "--provider-file"}, &out, &errOut); err != nil {
		t.Fatalf("render --provider-file: %v\n%s", err, errOut.String())
	}
	file := filepath.Join(t.TempDir(), "providers.json")
	if err := os.WriteFile(file, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	providers, err := cpcredentials.NewFromFile(file)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := providers.BuildConfigFromCP(&cp)
	if err != nil {
		t.Fatalf("BuildConfigFromCP: %v", err)
	}
	raw, ok := cfg.ExecProvider.Config.(*runtime.Unknown)
	if !ok {
		t.Fatalf("exec config = %T; want the extension's JSON", cfg.ExecProvider.Config)
	}
	got, err := parseClusterConfig(raw.Raw)
	if err != nil {
		t.Fatalf("crucible credential refuses the rendered extension: %v", err)
	}
	if diff := cmp.Diff(clusterConfig{Cluster: "wharf"}, got); diff != "" {
		t.Errorf("cluster config (-want +got):\n%s", diff)
	}
	want := []string{"kueue-system/wharf", "https://api.wharf.example.com:6443", "crucible", "-----BEGIN CERTIFICATE-----\nwharf\n-----END CERTIFICATE-----\n"}
	if diff := cmp.Diff(want, []string{cp.Namespace + "/" + cp.Name, cfg.Host, cfg.ExecProvider.Command, string(cfg.CAData)}); diff != "" {
		t.Errorf("ClusterProfile (-want +got):\n%s", diff)
	}
}

// Each refusal names the flag or the file at fault, and prints nothing.
func TestRenderClusterProfileRefusals(t *testing.T) {
	profile := clusterProfileFixture(t, "PEM")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no config", nil, "--config: required"},
		{"unknown cluster", []string{"--config", profile, "--cluster", "dock"}, `--cluster "dock": no such cluster`},
		{"bad namespace", []string{"--config", profile, "--namespace", "Kueue_System"}, `--namespace "Kueue_System"`},
		{"missing ca_file", []string{"--config", exampleProfile}, "cluster wharf: ca_file: open /etc/crucible/wharf/ca.crt"},
		{"empty command", []string{"--provider-file", "--command", ""}, "--command: provider command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := Run(t.Context(), append([]string{"render", "clusterprofile"}, tc.args...), &out, &errOut)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v; want it to contain %q", err, tc.want)
			}
			if out.Len() != 0 {
				t.Errorf("printed %q", out.String())
			}
		})
	}
}

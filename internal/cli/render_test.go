package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/tools/clientcmd"

	"crucible.dev/crucible/internal/render"
)

const exampleProfile = "../../examples/crucible.toml"

// render spoke --authn builtin names the setting when the username prefix
// would let hub subjects pass for the spoke's own names.
func TestRenderSpokeRefusesUsernamePrefix(t *testing.T) {
	for _, prefix := range []string{"", "system:", "system:hub:"} {
		var out, errOut bytes.Buffer
		err := Run(t.Context(), []string{"render", "spoke", "--config", exampleProfile, "--authn", "builtin", "--username-prefix", prefix}, &out, &errOut)
		if err == nil || !strings.HasPrefix(err.Error(), "--username-prefix: ") {
			t.Errorf("prefix %q: %v; want an error naming --username-prefix", prefix, err)
		}
		if out.Len() != 0 {
			t.Errorf("prefix %q: printed %q", prefix, out.String())
		}
	}
}

// render spoke --authn webhook-kubeconfig prints a kubeconfig with the
// client certificate and key by path.
func TestRenderSpokeWebhookKubeconfig(t *testing.T) {
	var out, errOut bytes.Buffer
	err := Run(t.Context(), []string{"render", "spoke", "--config", exampleProfile, "--authn", "webhook-kubeconfig",
		"--webhook-url", "https://10.0.0.5:9443/authenticate", "--webhook-ca-file", "/pki/ca.crt",
		"--webhook-client-cert", "/pki/apiserver-webhook.crt", "--webhook-client-key", "/pki/apiserver-webhook.key"}, &out, &errOut)
	if err != nil {
		t.Fatalf("render: %v\n%s", err, errOut.String())
	}
	cfg, err := clientcmd.Load(out.Bytes())
	if err != nil {
		t.Fatalf("load %s: %v", out.String(), err)
	}
	ctx := cfg.Contexts[cfg.CurrentContext]
	cluster, user := cfg.Clusters[ctx.Cluster], cfg.AuthInfos[ctx.AuthInfo]
	got := []string{cluster.Server, cluster.CertificateAuthority, user.ClientCertificate, user.ClientKey}
	want := []string{"https://10.0.0.5:9443/authenticate", "/pki/ca.crt", "/pki/apiserver-webhook.crt", "/pki/apiserver-webhook.key"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("kubeconfig = %v, want %v", got, want)
	}

	err = Run(t.Context(), []string{"render", "spoke", "--config", exampleProfile, "--authn", "webhook-kubeconfig", "--webhook-client-key", ""}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "client key file: required") {
		t.Errorf("without a client key: %v", err)
	}
}

// render spoke prints the loop namespace with Pod Security "restricted"
// enforced first, so that applying its output to a fresh spoke creates the
// namespace the Role lives in; --namespace=false leaves it out.
func TestRenderSpokeLoopNamespace(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{{nil, true}, {[]string{"--namespace=false"}, false}} {
		var out, errOut bytes.Buffer
		args := append([]string{"render", "spoke", "--config", exampleProfile, "--cluster", "wharf"}, tc.args...)
		if err := Run(t.Context(), args, &out, &errOut); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		first, _, _ := strings.Cut(out.String(), "\n---")
		got := strings.Contains(first, "kind: Namespace") && strings.Contains(first, "pod-security.kubernetes.io/enforce: restricted")
		if got != tc.want {
			t.Errorf("%v: first object is the restricted namespace: %v, want %v\n%s", tc.args, got, tc.want, first)
		}
		if n := strings.Count(out.String(), "kind: Namespace"); n != map[bool]int{true: 1, false: 0}[tc.want] {
			t.Errorf("%v: %d Namespace objects", tc.args, n)
		}
	}
}

// render spoke without capacity prints exactly what it printed before
// placement existed (testdata/render-spoke-example.yaml, rendered by the
// commit before it), with no rule on nodes nor a cluster-wide one on pods;
// with capacity = true in the entry it adds the capacity ClusterRole and its
// binding after it, and nothing else.
func TestRenderSpokeCapacity(t *testing.T) {
	before, err := os.ReadFile("testdata/render-spoke-example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	off, err := renderSpoke(t)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(before), off); diff != "" {
		t.Errorf("render spoke without capacity changed (-before +now):\n%s", diff)
	}
	if strings.Contains(off, "- nodes") || strings.Contains(off, render.CapacityRBACName) {
		t.Errorf("render spoke without capacity grants nodes or the capacity role:\n%s", off)
	}
	example, err := os.ReadFile(exampleProfile)
	if err != nil {
		t.Fatal(err)
	}
	withCapacity := filepath.Join(t.TempDir(), "crucible.toml")
	data := strings.Replace(string(example), "[[clusters]]\n", "[[clusters]]\ncapacity = true\n", 1)
	if err := os.WriteFile(withCapacity, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	on, err := renderSpoke(t, "--config", withCapacity)
	if err != nil {
		t.Fatal(err)
	}
	added, err := render.YAML(render.CapacityRBAC("hub:system:serviceaccount:crucible:crucible-controller")...)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(before)+"---\n"+string(added), on); diff != "" {
		t.Errorf("render spoke with capacity (-want +got):\n%s", diff)
	}
}

package cli

import (
	"bytes"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
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

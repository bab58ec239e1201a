package cli

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"crucible.dev/crucible/internal/testpki"
)

// webhookConfig has one provider whose keys cannot be fetched: a junk token
// is still answered (not authenticated), and readiness is 503.
const webhookConfig = `providers:
- name: hub
  allowedSubjects: ["system:serviceaccount:crucible:crucible-controller"]
  issuer:
    url: https://kubernetes.default.svc
    discoveryURL: https://127.0.0.1:1/.well-known/openid-configuration
    audiences: [wharf]
  claimMappings:
    username: {claim: sub, prefix: "hub:"}
`

// authn-webhook with --client-ca refuses TokenReviews from clients without
// a certificate from that CA (or with a name not allowed) in the handshake,
// answers the right client, serves /metrics only on --metrics-listen, and
// stops when its context ends.
func TestWebhookRequiresClientCertificate(t *testing.T) {
	dir := t.TempDir()
	ca, otherCA := testpki.NewCA(t, "webhook-ca"), testpki.NewCA(t, "other-ca")
	servingCert, servingKey := ca.Issue(t, "webhook", testpki.Server).Write(t, dir, "serving")
	clientCA := ca.Write(t, dir, "client-ca.crt")
	cfgFile := filepath.Join(dir, "webhook.yaml")
	if err := os.WriteFile(cfgFile, []byte(webhookConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	listen, metricsListen := freeAddr(t), freeAddr(t)

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, []string{"authn-webhook", "--config", cfgFile, "--listen", listen, "--metrics-listen", metricsListen,
			"--tls-cert", servingCert, "--tls-key", servingKey, "--client-ca", clientCA, "--client-name", "kube-apiserver"}, io.Discard, io.Discard)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("authn-webhook ended with %v", err)
		}
	})

	apiserver := ca.Issue(t, "kube-apiserver", testpki.Client).Pair(t)
	admin := ca.Issue(t, "devstack-admin", testpki.Client).Pair(t)
	foreign := otherCA.Issue(t, "kube-apiserver", testpki.Client).Pair(t)
	client := func(cert *tls.Certificate) *http.Client {
		cfg := &tls.Config{RootCAs: ca.Pool()}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 5 * time.Second}
	}
	plain := &http.Client{Timeout: 5 * time.Second}
	waitFor(t, "the webhook to listen", func() bool {
		resp, err := client(&apiserver).Get("https://" + listen + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		mresp, merr := plain.Get("http://" + metricsListen + "/healthz")
		if merr == nil {
			mresp.Body.Close()
		}
		return err == nil && merr == nil
	})

	review := `{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":"not-a-jwt"}}`
	for name, cert := range map[string]*tls.Certificate{"no certificate": nil, "another CA": &foreign, "a name not allowed": &admin} {
		resp, err := client(cert).Post("https://"+listen+"/authenticate", "application/json", strings.NewReader(review))
		if err == nil {
			resp.Body.Close()
			t.Errorf("%s: TokenReview answered %s, want the TLS handshake refused", name, resp.Status)
		}
	}
	resp, err := client(&apiserver).Post("https://"+listen+"/authenticate", "application/json", strings.NewReader(review))
	if err != nil {
		t.Fatalf("TokenReview with kube-apiserver's certificate: %v", err)
	}
	var answer struct {
		Status struct{ Authenticated bool } `json:"status"`
		Kind   string                       `json:"kind"`
	}
	err = json.NewDecoder(resp.Body).Decode(&answer)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || answer.Kind != "TokenReview" || answer.Status.Authenticated {
		t.Errorf("TokenReview = %s %+v %v, want 200 not authenticated", resp.Status, answer, err)
	}

	if code := status(t, client(&apiserver), "https://"+listen+"/metrics"); code != http.StatusNotFound {
		t.Errorf("/metrics on the TLS listener = %d, want 404", code)
	}
	if code := status(t, plain, "http://"+metricsListen+"/metrics"); code != http.StatusOK {
		t.Errorf("/metrics on --metrics-listen = %d, want 200", code)
	}
	if code := status(t, plain, "http://"+metricsListen+"/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz on --metrics-listen = %d, want 503 (keys unreachable)", code)
	}
	if code := status(t, plain, "http://"+metricsListen+"/authenticate"); code != http.StatusNotFound {
		t.Errorf("/authenticate on --metrics-listen = %d, want 404", code)
	}
}

// Without --client-ca, and without saying it is meant, the webhook does not
// start; contradictory listener flags are refused together.
func TestWebhookListenerFlagsRefused(t *testing.T) {
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "webhook.yaml")
	if err := os.WriteFile(cfgFile, []byte(webhookConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"no client CA", []string{"--tls-cert", "c", "--tls-key", "k"}, []string{"--client-ca is required", "--insecure-no-client-auth"}},
		{"plain HTTP, no client CA", []string{"--insecure-http"}, []string{"--client-ca is required"}},
		{"client CA and insecure", []string{"--tls-cert", "c", "--tls-key", "k", "--client-ca", "ca", "--insecure-no-client-auth"}, []string{"exclude each other"}},
		{"client CA over plain HTTP", []string{"--insecure-http", "--client-ca", "ca"}, []string{"client certificates need TLS"}},
		{"client name without CA", []string{"--tls-cert", "c", "--tls-key", "k", "--client-name", "x", "--insecure-no-client-auth"}, []string{"need a client CA"}},
		{"same address twice", []string{"--insecure-http", "--insecure-no-client-auth", "--listen", "127.0.0.1:9443", "--metrics-listen", "127.0.0.1:9443"}, []string{"must differ"}},
		{"two problems at once", []string{"--tls-cert", "c"}, []string{"certificate and key are required", "--client-ca is required"}},
		{"allowed host with a port", []string{"--insecure-http", "--insecure-no-client-auth", "--metrics-allowed-hosts", "localhost,metrics.example:9090"},
			[]string{`--metrics-allowed-hosts "metrics.example:9090": must be a host name without a port`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Run(t.Context(), append([]string{"authn-webhook", "--config", cfgFile}, tt.args...), io.Discard, io.Discard)
			for _, w := range tt.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("err = %v, want it to contain %q", err, w)
				}
			}
		})
	}
}

// --insecure-no-client-auth and --metrics-listen "" run the TokenReview
// listener alone, without client certificates.
func TestWebhookInsecureNoClientAuth(t *testing.T) {
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "webhook.yaml")
	if err := os.WriteFile(cfgFile, []byte(webhookConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	listen := freeAddr(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, []string{"authn-webhook", "--config", cfgFile, "--listen", listen, "--insecure-http",
			"--insecure-no-client-auth", "--metrics-listen", ""}, io.Discard, io.Discard)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("authn-webhook ended with %v", err)
		}
	})
	plain := &http.Client{Timeout: 5 * time.Second}
	waitFor(t, "the webhook to listen", func() bool {
		resp, err := plain.Get("http://" + listen + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})
	if code := status(t, plain, "http://"+listen+"/metrics"); code != http.StatusNotFound {
		t.Errorf("/metrics = %d, want 404", code)
	}
}

func status(t *testing.T, c *http.Client, url string) int {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// waitFor polls cond until it holds or ten seconds pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestWebhookStateFlags: --state-dir and --state-configmap are checked
// before the webhook starts, each error naming the flag.
func TestWebhookStateFlags(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		dir, configMap, kubeconfig string
		want                       string // "" for a store
	}{
		{"", "", "", ""},
		{t.TempDir(), "", "", ""},
		{"", "ns/name", kubeconfig, ""},
		{t.TempDir(), "ns/name", kubeconfig, "exclude each other"},
		{"", "", kubeconfig, "only used with --state-configmap"},
		{"", "name", kubeconfig, `--state-configmap "name": want NAMESPACE/NAME`},
		{"", "ns/", kubeconfig, "want NAMESPACE/NAME"},
		{"", "ns/a/b", kubeconfig, "want NAMESPACE/NAME"},
		{"", "Bad_NS/name", kubeconfig, `namespace "Bad_NS"`},
		{"", "ns/name", filepath.Join(t.TempDir(), "missing"), "--state-configmap: the API server's client"},
	} {
		_, err := webhookState(tt.dir, tt.configMap, tt.kubeconfig)
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("webhookState(%q, %q, %q) = %v, want %q", tt.dir, tt.configMap, tt.kubeconfig, err, tt.want)
		}
	}
}

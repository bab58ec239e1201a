package render_test

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"crucible.dev/crucible/internal/render"
	"crucible.dev/crucible/internal/testpki"
)

// The kubeconfig render writes, loaded the way kube-apiserver loads it
// (clientcmd), reaches a webhook that requires a client certificate, and
// names the key by path only.
func TestWebhookKubeconfigReachesWebhook(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, "ca")
	servingCert, servingKey := ca.Issue(t, "serving", testpki.Server).Write(t, dir, "serving")
	clientCert, clientKey := ca.Issue(t, "client", testpki.Client).Write(t, dir, "client")
	caFile := ca.Write(t, dir, "ca.crt")

	var gotCN string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotCN = r.TLS.PeerCertificates[0].Subject.CommonName
		_, _ = w.Write([]byte("{}"))
	}))
	serving, err := tls.LoadX509KeyPair(servingCert, servingKey)
	if err != nil {
		t.Fatal(err)
	}
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{serving}, ClientCAs: ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	wc := render.WebhookClient{
		URL: srv.URL + "/authenticate", CAFile: caFile,
		ClientCertFile: clientCert, ClientKeyFile: clientKey,
	}
	data, err := render.WebhookKubeconfig(wc)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "PRIVATE KEY") || strings.Contains(string(data), "-data:") {
		t.Errorf("kubeconfig inlines key material:\n%s", data)
	}
	cfg, err := clientcmd.Load(data)
	if err != nil {
		t.Fatalf("load %s: %v", data, err)
	}
	restCfg, err := clientcmd.NewDefaultClientConfig(*cfg, nil).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{wc.CAFile, wc.ClientCertFile, wc.ClientKeyFile, wc.URL},
		[]string{restCfg.CAFile, restCfg.CertFile, restCfg.KeyFile, restCfg.Host}); diff != "" {
		t.Errorf("kubeconfig (-want +got):\n%s", diff)
	}
	client, err := rest.HTTPClientFor(restCfg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Post(wc.URL, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatalf("POST through the rendered kubeconfig: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || gotCN != "client" {
		t.Errorf("status %d, client CN %q; want 200 from CN client", resp.StatusCode, gotCN)
	}
}

func TestWebhookKubeconfigRefuses(t *testing.T) {
	good := render.WebhookClient{URL: "https://127.0.0.1:9443/authenticate", CAFile: "ca.crt", ClientCertFile: "c.crt", ClientKeyFile: "c.key"}
	tests := []struct {
		name string
		edit func(*render.WebhookClient)
		want string
	}{
		{"plain http", func(c *render.WebhookClient) { c.URL = "http://127.0.0.1:9443/" }, "want https"},
		{"no URL", func(c *render.WebhookClient) { c.URL = "" }, "want https"},
		{"credentials in URL", func(c *render.WebhookClient) { c.URL = "https://u:p@h/" }, "without credentials"},
		{"not a URL", func(c *render.WebhookClient) { c.URL = "https://%zz" }, "want https"},
		{"no CA", func(c *render.WebhookClient) { c.CAFile = "" }, "CA file: required"},
		{"no client cert", func(c *render.WebhookClient) { c.ClientCertFile = "" }, "client certificate file: required"},
		{"no client key", func(c *render.WebhookClient) { c.ClientKeyFile = "" }, "client key file: required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := good
			tt.edit(&c)
			if _, err := render.WebhookKubeconfig(c); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("WebhookKubeconfig = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

package render_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"crucible.dev/crucible/internal/render"
)

// The kubeconfig render writes, loaded the way kube-apiserver loads it
// (clientcmd), reaches a webhook that requires a client certificate, and
// names the key by path only.
func TestWebhookKubeconfigReachesWebhook(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	ca.issue(t, dir, "serving", true)
	ca.issue(t, dir, "client", false)
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, ca.pem, 0o644); err != nil {
		t.Fatal(err)
	}

	var gotCN string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotCN = r.TLS.PeerCertificates[0].Subject.CommonName
		_, _ = w.Write([]byte("{}"))
	}))
	serving, err := tls.LoadX509KeyPair(filepath.Join(dir, "serving.crt"), filepath.Join(dir, "serving.key"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{serving}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	wc := render.WebhookClient{
		URL: srv.URL + "/authenticate", CAFile: caFile,
		ClientCertFile: filepath.Join(dir, "client.crt"), ClientKeyFile: filepath.Join(dir, "client.key"),
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

// testCA signs serving and client certificates for 127.0.0.1.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue writes dir/name.crt and dir/name.key, CN name.
func (ca *testCA) issue(t *testing.T, dir, name string, server bool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".key"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
}

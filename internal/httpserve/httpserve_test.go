package httpserve

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestOptionsRefused(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"no certificate", Options{Addr: "127.0.0.1:0"}, "a TLS certificate and key are required"},
		{"plain HTTP off loopback", Options{Addr: "0.0.0.0:0", InsecureHTTP: true}, "only allowed on a loopback address"},
		{"plain HTTP on a name", Options{Addr: "example.com:0", InsecureHTTP: true}, "only allowed on a loopback address"},
		{"plain HTTP and a certificate", Options{Addr: "127.0.0.1:0", InsecureHTTP: true, CertFile: "c", KeyFile: "k"}, "exclude each other"},
		{"missing certificate files", Options{Addr: "127.0.0.1:0", CertFile: "/nonexistent/c", KeyFile: "/nonexistent/k"}, "load serving certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ListenAndServe(t.Context(), tt.opts, http.NotFoundHandler(), slog.New(slog.DiscardHandler))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ListenAndServe = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestListenAndServeTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	ca := writeServingCert(t, certFile, keyFile)
	addr := freeAddr(t)

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- ListenAndServe(ctx, Options{Addr: addr, CertFile: certFile, KeyFile: keyFile}, healthz(), slog.New(slog.DiscardHandler))
	}()

	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca}}, Timeout: 2 * time.Second}
	var resp *http.Response
	var err error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if resp, err = client.Get("https://" + addr + "/healthz"); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("GET /healthz over TLS: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /healthz = %d, want 200", resp.StatusCode)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("ListenAndServe after cancel = %v, want nil", err)
	}
}

func healthz() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {})
	return mux
}

// writeServingCert writes httptest's certificate for 127.0.0.1 and returns
// a pool that trusts it.
func writeServingCert(t *testing.T, certFile, keyFile string) *x509.CertPool {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	srv.StartTLS()
	cert := srv.TLS.Certificates[0]
	srv.Close()
	keyDER, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, certFile, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]})))
	writeFile(t, keyFile, string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})))
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return pool
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

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

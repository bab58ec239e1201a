// Package webhooktest provides a null authn webhook for benchmarks: it
// answers every TokenReview authenticated without looking at the token, over
// the same TLS, HTTP/2 and JSON stack as crucible's webhook
// (internal/httpserve, client certificates required, encoding/json), so the
// difference between the two is what crucible's checks cost and the rest
// is what the hop itself costs. It is for measurements only: it accepts
// any token.
package webhooktest

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"crucible.dev/crucible/internal/httpserve"
	"crucible.dev/crucible/internal/testpki"
)

// Null is a running null webhook and the files a kube-apiserver needs to
// call it.
type Null struct {
	// URL is the TokenReview endpoint.
	URL string
	// CAFile verifies the webhook's serving certificate.
	CAFile string
	// ClientCertFile and ClientKeyFile are the client certificate the
	// webhook requires.
	ClientCertFile, ClientKeyFile string

	reviews atomic.Int64
}

// Reviews is how many TokenReviews it has answered.
func (n *Null) Reviews() int64 { return n.reviews.Load() }

// StartNull serves a null webhook that maps every token to username until
// the test ends.
func StartNull(t testing.TB, username string) *Null {
	t.Helper()
	dir := t.TempDir()
	ca := testpki.NewCA(t, "null-webhook-ca")
	n := &Null{CAFile: ca.Write(t, dir, "ca.crt")}
	servingCert, servingKey := ca.Issue(t, "null-webhook", testpki.Server).Write(t, dir, "serving")
	n.ClientCertFile, n.ClientKeyFile = ca.Issue(t, "kube-apiserver-null-webhook-client", testpki.Client).Write(t, dir, "client")

	addr := freeAddr(t)
	n.URL = "https://" + addr + "/authenticate"
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	opts := httpserve.Options{
		Name: "null-webhook", Addr: addr, CertFile: servingCert, KeyFile: servingKey,
		ClientCAFile: n.CAFile, WriteTimeout: 40 * time.Second,
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	go func() { done <- httpserve.ListenAndServe(ctx, opts, n.handler(username), log) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("null webhook: %v", err)
		}
	})
	waitListening(t, addr)
	return n
}

// handler answers every TokenReview authenticated as username. It reads the
// request as crucible's webhook does (bounded body, encoding/json into the
// fields it needs), so only the token checks are missing.
func (n *Null) handler(username string) http.Handler {
	user, _ := json.Marshal(username) // a string always encodes
	mux := http.NewServeMux()
	mux.HandleFunc("POST /authenticate", func(w http.ResponseWriter, r *http.Request) {
		var body bytes.Buffer
		if _, err := body.ReadFrom(http.MaxBytesReader(w, r.Body, 64<<10)); err != nil {
			http.Error(w, "cannot read request body", http.StatusBadRequest)
			return
		}
		var req struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Spec       struct {
				Token string `json:"token"`
			} `json:"spec"`
		}
		if err := json.Unmarshal(body.Bytes(), &req); err != nil || req.Kind != "TokenReview" || req.Spec.Token == "" {
			http.Error(w, "not a TokenReview", http.StatusBadRequest)
			return
		}
		n.reviews.Add(1)
		apiVersion, _ := json.Marshal(req.APIVersion) // a string always encodes
		answer := `{"kind":"TokenReview","apiVersion":` + string(apiVersion) +
			`,"metadata":{},"spec":{},"status":{"authenticated":true,"user":{"username":` + string(user) + `}}}` + "\n"
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, answer)
	})
	return mux
}

func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// waitListening polls until addr accepts TLS handshakes' TCP connections.
func waitListening(t testing.TB, addr string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = conn.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(errors.Join(errors.New("null webhook never listened"), err))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ClientTLS is the TLS configuration of a client of n: its CA and its
// client certificate.
func (n *Null) ClientTLS(t testing.TB) *tls.Config {
	t.Helper()
	pemCA, err := os.ReadFile(n.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pemCA)
	cert, err := tls.LoadX509KeyPair(n.ClientCertFile, n.ClientKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
}

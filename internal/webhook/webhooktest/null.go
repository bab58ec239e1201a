// Package webhooktest provides a null authn webhook for benchmarks: it
// answers every TokenReview authenticated without looking at the token, over
// the same TLS, HTTP/2 and JSON stack as crucible's webhook
// (internal/httpserve, client certificates required, encoding/json), in a
// process of its own as crucible's is, so the difference between the two is
// what crucible's checks cost and the rest is what the hop itself costs. It
// is for measurements only: it accepts any token.
package webhooktest

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
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
}

// childEnv names the variable that makes a test binary the null webhook
// (ServeIfChild); its value is the child's spec, JSON.
const childEnv = "CRUCIBLE_WEBHOOKTEST_NULL"

// childSpec is what the null webhook's process serves.
type childSpec struct {
	Addr, CertFile, KeyFile, ClientCAFile, Username string
}

// StartNull serves a null webhook that maps every token to username until
// the test ends, in a process of its own: the test binary again, which the
// package's TestMain hands to ServeIfChild first. Served from the test's
// own process it shared the load generator's scheduler and was spared what
// a process of its own costs on every review (waking it, its sysmon, its
// idle threads looking for work): 180 µs of CPU a review there against
// 240 µs on its own under the webhook benchmark (issue 41), while
// crucible's webhook always paid the latter. env is its environment
// (devstack.SpokeProcessEnv, for the spoke's webhook's garbage collector
// target).
func StartNull(t testing.TB, username string, env []string) *Null {
	t.Helper()
	dir := t.TempDir()
	ca := testpki.NewCA(t, "null-webhook-ca")
	n := &Null{CAFile: ca.Write(t, dir, "ca.crt")}
	spec := childSpec{Addr: freeAddr(t), ClientCAFile: n.CAFile, Username: username}
	spec.CertFile, spec.KeyFile = ca.Issue(t, "null-webhook", testpki.Server).Write(t, dir, "serving")
	n.ClientCertFile, n.ClientKeyFile = ca.Issue(t, "kube-apiserver-null-webhook-client", testpki.Client).Write(t, dir, "client")
	n.URL = "https://" + spec.Addr + "/authenticate"

	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	encoded, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	log, err := os.Create(filepath.Join(dir, "null-webhook.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd := exec.Command(self)
	cmd.Env = append(slices.Clip(env), childEnv+"="+string(encoded))
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // gone with the test, even on a crash
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the null webhook: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if err := <-done; err != nil {
			t.Errorf("null webhook: %v (its log: %s)", err, tail(filepath.Join(dir, "null-webhook.log")))
		}
	})
	waitListening(t, spec.Addr, done)
	return n
}

// ServeIfChild serves the null webhook and exits when the process is one
// StartNull started, and returns at once otherwise. A test package that
// calls StartNull calls it first in its TestMain.
func ServeIfChild() {
	encoded, ok := os.LookupEnv(childEnv)
	if !ok {
		return
	}
	var spec childSpec
	if err := json.Unmarshal([]byte(encoded), &spec); err != nil {
		fmt.Fprintf(os.Stderr, "null webhook: %s: %v\n", childEnv, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	opts := httpserve.Options{
		Name: "null-webhook", Addr: spec.Addr, CertFile: spec.CertFile, KeyFile: spec.KeyFile,
		ClientCAFile: spec.ClientCAFile, WriteTimeout: 40 * time.Second,
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := httpserve.ListenAndServe(ctx, opts, (&Null{}).handler(spec.Username), log); err != nil {
		fmt.Fprintf(os.Stderr, "null webhook: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// tail is the end of the file at path, for an error message.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	const max = 2 << 10
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(bytes.TrimSpace(b))
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

// waitListening polls until addr accepts TLS handshakes' TCP connections,
// or the process serving it has ended (done).
func waitListening(t testing.TB, addr string, done <-chan error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = conn.Close()
			return
		}
		select {
		case exit := <-done:
			t.Fatalf("null webhook ended before it listened: %v", exit)
		default:
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

// Package webhooktest provides stand-in authn webhooks for benchmarks, over
// the same TLS, HTTP/2 and JSON stack as crucible's webhook
// (internal/httpserve, client certificates required, encoding/json) and in a
// process of their own as crucible's is: a null webhook that answers every
// TokenReview authenticated without looking at the token, and a library
// webhook that judges tokens with k8s.io/apiserver's JWT authenticator and
// nothing else. Crucible's webhook against the library one is what
// crucible's own checks cost; the library one against the null one is what
// checking a signature costs; the rest is the hop. They are for
// measurements only: the null webhook accepts any token.
package webhooktest

import (
	"bytes"
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
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

	jose "github.com/go-jose/go-jose/v4"
	authv1 "k8s.io/api/authentication/v1"
	"k8s.io/apiserver/plugin/pkg/authenticator/token/oidc"

	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/httpserve"
	"crucible.dev/crucible/internal/testpki"
	"crucible.dev/crucible/internal/webhook"
)

// Webhook is a stand-in authn webhook and the files a kube-apiserver needs
// to call it.
type Webhook struct {
	// URL is the TokenReview endpoint.
	URL string
	// CAFile verifies the webhook's serving certificate.
	CAFile string
	// ClientCertFile and ClientKeyFile are the client certificate the
	// webhook requires.
	ClientCertFile, ClientKeyFile string

	t    testing.TB
	dir  string
	spec childSpec
}

// childEnv names the variable that makes a test binary a stand-in webhook
// (ServeIfChild); its value is the child's spec, JSON.
const childEnv = "CRUCIBLE_WEBHOOKTEST_CHILD"

// childSpec is what the webhook's process serves: every review
// authenticated as Username (the null webhook), or as k8s.io/apiserver's
// JWT authenticator judges it (ConfigFile and PublicKeyFile set).
type childSpec struct {
	Addr, CertFile, KeyFile, ClientCAFile string
	Username                              string
	ConfigFile, PublicKeyFile             string
}

// Prepare picks the webhook's address and writes its certificates, so that
// a kube-apiserver can be pointed at it before it serves (ServeNull,
// ServeLibrary).
func Prepare(t testing.TB) *Webhook {
	t.Helper()
	dir := t.TempDir()
	ca := testpki.NewCA(t, "stand-in-webhook-ca")
	w := &Webhook{CAFile: ca.Write(t, dir, "ca.crt"), t: t, dir: dir}
	w.spec = childSpec{Addr: freeAddr(t), ClientCAFile: w.CAFile}
	w.spec.CertFile, w.spec.KeyFile = ca.Issue(t, "stand-in-webhook", testpki.Server).Write(t, dir, "serving")
	w.ClientCertFile, w.ClientKeyFile = ca.Issue(t, "kube-apiserver-stand-in-webhook-client", testpki.Client).Write(t, dir, "client")
	w.URL = "https://" + w.spec.Addr + "/authenticate"
	return w
}

// StartNull serves a null webhook that maps every token to username until
// the test ends (Prepare, then ServeNull).
func StartNull(t testing.TB, username string, env []string) *Webhook {
	t.Helper()
	w := Prepare(t)
	w.ServeNull(username, env)
	return w
}

// ServeNull answers every review authenticated as username, until the test
// ends, in a process of its own: the test binary again, which the package's
// TestMain hands to ServeIfChild first. Served from the test's own process
// it shared the load generator's scheduler and was spared what a process of
// its own costs on every review (waking it, its sysmon, its idle threads
// looking for work): 180 µs of CPU a review there against 240 µs on its own
// under the webhook benchmark (issue 41), while crucible's webhook always
// paid the latter. env is its environment (devstack.SpokeProcessEnv, for
// the spoke's webhook's garbage collector target).
func (w *Webhook) ServeNull(username string, env []string) {
	w.t.Helper()
	spec := w.spec
	spec.Username = username
	w.serve(spec, env)
}

// ServeLibrary answers every review as k8s.io/apiserver's JWT authenticator
// judges its token and nothing more: the first provider of the crucible
// webhook configuration at configFile, its only key the PKIX public key
// (PEM) at publicKeyFile (no discovery), the request read as the null
// webhook reads it. It is the least any webhook that judges tokens with
// that library does: the floor under crucible's webhook, in the same
// process shape. Served as ServeNull.
func (w *Webhook) ServeLibrary(configFile, publicKeyFile string, env []string) {
	w.t.Helper()
	spec := w.spec
	spec.ConfigFile, spec.PublicKeyFile = configFile, publicKeyFile
	w.serve(spec, env)
}

func (w *Webhook) serve(spec childSpec, env []string) {
	t := w.t
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	encoded, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	logFile := filepath.Join(w.dir, "webhook.log")
	log, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd := exec.Command(self)
	cmd.Env = append(slices.Clip(env), childEnv+"="+string(encoded))
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // gone with the test, even on a crash
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the stand-in webhook: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if err := <-done; err != nil {
			t.Errorf("stand-in webhook: %v (its log: %s)", err, devstack.LogTail(logFile, 20))
		}
	})
	waitListening(t, spec.Addr, done, logFile)
}

// ServeIfChild serves the stand-in webhook and exits when the process is
// one a Webhook started, and returns at once otherwise. A test package that
// serves a Webhook calls it first in its TestMain.
func ServeIfChild() {
	encoded, ok := os.LookupEnv(childEnv)
	if !ok {
		return
	}
	if err := serveChild(encoded); err != nil {
		fmt.Fprintf(os.Stderr, "stand-in webhook: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func serveChild(encoded string) error {
	var spec childSpec
	if err := json.Unmarshal([]byte(encoded), &spec); err != nil {
		return fmt.Errorf("%s: %w", childEnv, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	accepted, err := json.Marshal(authv1.TokenReviewStatus{Authenticated: true, User: authv1.UserInfo{Username: spec.Username}})
	if err != nil {
		return err
	}
	judge := func(context.Context, string) ([]byte, error) { return accepted, nil }
	if spec.ConfigFile != "" {
		if judge, err = libraryJudge(ctx, spec.ConfigFile, spec.PublicKeyFile); err != nil {
			return err
		}
	}
	opts := httpserve.Options{
		Name: "stand-in-webhook", Addr: spec.Addr, CertFile: spec.CertFile, KeyFile: spec.KeyFile,
		ClientCAFile: spec.ClientCAFile, WriteTimeout: 40 * time.Second,
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return httpserve.ListenAndServe(ctx, opts, handler(judge), log)
}

// libraryJudge is k8s.io/apiserver's JWT authenticator for the first
// provider of the crucible webhook configuration at configFile, with the
// PKIX public key at keyFile as its only key; its answer is the review's
// status, encoded.
func libraryJudge(ctx context.Context, configFile, keyFile string) (func(context.Context, string) ([]byte, error), error) {
	cfg, err := webhook.LoadConfig(configFile)
	if err != nil {
		return nil, err
	}
	if len(cfg.Providers) == 0 {
		return nil, fmt.Errorf("%s: no provider", configFile)
	}
	pemKey, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(pemKey)
	if block == nil {
		return nil, fmt.Errorf("%s: no PEM block", keyFile)
	}
	pub, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", keyFile, err)
	}
	jwtConfig := cfg.Providers[0].JWT
	jwtConfig.Issuer.DiscoveryURL = "" // keys are given; the library refuses both
	authn, err := oidc.New(ctx, oidc.Options{
		JWTAuthenticator:     jwtConfig,
		KeySet:               staticKey{pub},
		SupportedSigningAlgs: []string{"RS256"},
	})
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, token string) ([]byte, error) {
		var status authv1.TokenReviewStatus
		switch resp, ok, err := authn.AuthenticateToken(ctx, token); {
		case err != nil:
			status.Error = err.Error()
		case ok:
			u := resp.User
			status = authv1.TokenReviewStatus{Authenticated: true, User: authv1.UserInfo{Username: u.GetName(), UID: u.GetUID(), Groups: u.GetGroups()}}
		}
		return json.Marshal(status)
	}, nil
}

// staticKey is a key set of one public key, verifying as go-oidc's remote
// key set does once it holds the key.
type staticKey struct{ key crypto.PublicKey }

func (k staticKey) VerifySignature(_ context.Context, token string) ([]byte, error) {
	jws, err := jose.ParseSignedCompact(token, []jose.SignatureAlgorithm{jose.RS256})
	if err != nil {
		return nil, err
	}
	return jws.Verify(k.key)
}

// handler answers TokenReviews with judge's status (encoded). It reads the
// request as crucible's webhook does (bounded body, encoding/json into the
// fields it needs) and writes the answer from pieces as crucible's does, so
// only crucible's own checks are missing.
func handler(judge func(context.Context, string) ([]byte, error)) http.Handler {
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
		status, err := judge(r.Context(), req.Spec.Token)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		apiVersion, _ := json.Marshal(req.APIVersion) // a string always encodes
		answer := `{"kind":"TokenReview","apiVersion":` + string(apiVersion) + `,"metadata":{},"spec":{},"status":` + string(status) + "}\n"
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
// or the process serving it has ended (done; its log at logFile).
func waitListening(t testing.TB, addr string, done <-chan error, logFile string) {
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
			t.Fatalf("stand-in webhook ended before it listened: %v (its log: %s)", exit, devstack.LogTail(logFile, 20))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal(errors.Join(errors.New("stand-in webhook never listened"), err))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ClientTLS is the TLS configuration of a client of w: its CA and its
// client certificate.
func (w *Webhook) ClientTLS(t testing.TB) *tls.Config {
	t.Helper()
	pemCA, err := os.ReadFile(w.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pemCA)
	cert, err := tls.LoadX509KeyPair(w.ClientCertFile, w.ClientKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
}

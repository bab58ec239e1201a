package httpserve

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"crucible.dev/crucible/internal/testpki"
)

// A listener with a client CA refuses, in the TLS handshake, a client
// without a certificate, with one from another CA, and with one of the right
// CA that names no allowed client; the right one works over HTTP/1.1 and
// HTTP/2. Replacing the CA file or the serving certificate takes effect
// without a restart.
func TestClientCertificates(t *testing.T) {
	dir := t.TempDir()
	caA, caB := testpki.NewCA(t, "ca-a"), testpki.NewCA(t, "ca-b")
	caFile := filepath.Join(dir, "client-ca.crt")
	writeFile(t, caFile, string(caA.PEM))
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	servingA := caA.Issue(t, "serving-a", testpki.Server)
	writeFile(t, certFile, string(servingA.CertPEM))
	writeFile(t, keyFile, string(servingA.KeyPEM))

	addr := freeAddr(t)
	var served atomic.Int64
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- ListenAndServe(ctx, Options{Addr: addr, CertFile: certFile, KeyFile: keyFile, ClientCAFile: caFile,
			ClientNames: []string{"kube-apiserver", "apiserver.example"}}, counting(&served), slog.New(slog.DiscardHandler))
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ListenAndServe after cancel = %v", err)
		}
	})

	roots := x509.NewCertPool()
	roots.AddCert(caA.Cert)
	get := func(client *tls.Certificate, h2 bool) (*http.Response, error) {
		cfg := &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}
		if client != nil {
			cfg.Certificates = []tls.Certificate{*client}
		}
		tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: h2}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get("https://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return resp, err
	}
	waitServing(t, func() error {
		_, err := get(nil, false)
		if err != nil && strings.Contains(err.Error(), "connection refused") {
			return err
		}
		return nil
	})

	good := caA.Issue(t, "kube-apiserver", testpki.Client).Pair(t)
	bySAN := caA.Issue(t, "someone", testpki.Client, "apiserver.example").Pair(t)
	otherName := caA.Issue(t, "devstack-admin", testpki.Client).Pair(t)
	otherCA := caB.Issue(t, "kube-apiserver", testpki.Client).Pair(t)
	for _, h2 := range []bool{false, true} {
		for _, c := range []struct {
			name string
			cert *tls.Certificate
			ok   bool
		}{
			{"no certificate", nil, false},
			{"another CA", &otherCA, false},
			{"a name not allowed", &otherName, false},
			{"allowed CN", &good, true},
			{"allowed DNS SAN", &bySAN, true},
		} {
			before := served.Load()
			resp, err := get(c.cert, h2)
			switch {
			case c.ok && (err != nil || resp.StatusCode != http.StatusOK):
				t.Errorf("h2=%v %s: %v, want 200", h2, c.name, err)
			case c.ok && h2 && resp.ProtoMajor != 2:
				t.Errorf("h2=%v %s: protocol %s, want HTTP/2", h2, c.name, resp.Proto)
			case !c.ok && (err == nil || served.Load() != before):
				t.Errorf("h2=%v %s: %v, handler reached %d times; want refused before any handler", h2, c.name, err, served.Load()-before)
			}
		}
	}

	// The CA file now holds CA B only: B's client gets in, A's does not.
	writeFile(t, caFile, string(caB.PEM)+"\n")
	touch(t, caFile)
	if _, err := get(&otherCA, false); err != nil {
		t.Errorf("after the client CA changed to B: B's client: %v", err)
	}
	if _, err := get(&good, false); err == nil {
		t.Errorf("after the client CA changed to B: A's client: %v, want refused", err)
	}
	// A broken CA file keeps the last good pool.
	writeFile(t, caFile, "not a certificate")
	touch(t, caFile)
	if _, err := get(&otherCA, false); err != nil {
		t.Errorf("after a broken client CA file: %v, want the previous pool", err)
	}

	// The serving certificate still reloads: a new one from CA B is served.
	servingB := caB.Issue(t, "serving-b", testpki.Server)
	writeFile(t, certFile, string(servingB.CertPEM))
	writeFile(t, keyFile, string(servingB.KeyPEM))
	touch(t, certFile)
	roots.AddCert(caB.Cert)
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", Certificates: []tls.Certificate{otherCA}})
	if err != nil {
		t.Fatalf("dial after serving certificate change: %v", err)
	}
	defer conn.Close()
	if cn := conn.ConnectionState().PeerCertificates[0].Subject.CommonName; cn != "serving-b" {
		t.Errorf("served certificate CN %q, want serving-b", cn)
	}
}

func TestClientAuthOptionsRefused(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"client CA over plain HTTP", Options{Addr: "127.0.0.1:0", InsecureHTTP: true, ClientCAFile: "ca"}, "need TLS"},
		{"names without a CA", Options{Addr: "127.0.0.1:0", CertFile: "c", KeyFile: "k", ClientNames: []string{"x"}}, "need a client CA"},
		{"missing CA file", Options{Addr: freeAddr(t), CertFile: "c", KeyFile: "k"}, "load serving certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ListenAndServe(t.Context(), tt.opts, http.NotFoundHandler(), slog.New(slog.DiscardHandler))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ListenAndServe = %v, want an error containing %q", err, tt.want)
			}
		})
	}

	dir := t.TempDir()
	ca := testpki.NewCA(t, "ca")
	serving := ca.Issue(t, "serving", testpki.Server)
	certFile, keyFile, caFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.crt")
	writeFile(t, certFile, string(serving.CertPEM))
	writeFile(t, keyFile, string(serving.KeyPEM))
	for name, content := range map[string]string{"empty CA file": "", "CA file without PEM": "garbage"} {
		writeFile(t, caFile, content)
		err := ListenAndServe(t.Context(), Options{Addr: freeAddr(t), CertFile: certFile, KeyFile: keyFile, ClientCAFile: caFile}, http.NotFoundHandler(), slog.New(slog.DiscardHandler))
		if err == nil || !strings.Contains(err.Error(), "load client CA") {
			t.Errorf("%s: %v, want load client CA error", name, err)
		}
	}
	os.Remove(caFile)
	err := ListenAndServe(t.Context(), Options{Addr: freeAddr(t), CertFile: certFile, KeyFile: keyFile, ClientCAFile: caFile}, http.NotFoundHandler(), slog.New(slog.DiscardHandler))
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing CA file: %v, want ErrNotExist", err)
	}
}

// A listener that carries no credentials may serve plain HTTP anywhere.
func TestNoCredentialsPlainHTTP(t *testing.T) {
	if err := (Options{Addr: "0.0.0.0:9090", InsecureHTTP: true, NoCredentials: true}).Validate(); err != nil {
		t.Errorf("Validate = %v, want nil", err)
	}
}

// counting serves /healthz and counts the requests that reached it.
func counting(n *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { n.Add(1) })
}

func waitServing(t *testing.T, try func() error) {
	t.Helper()
	var err error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if err = try(); err == nil {
			return
		}
	}
	t.Fatalf("listener never came up: %v", err)
}

// touch moves a file's modification time forward, so a rewrite within the
// file system's timestamp granularity is still seen as a change.
func touch(t *testing.T, path string) {
	t.Helper()
	later := time.Now().Add(time.Duration(time.Now().UnixNano()%1000+1) * time.Second)
	if err := os.Chtimes(path, later, later); err != nil {
		t.Fatal(err)
	}
}

// A listener that asks for client certificates serves a client without one,
// shows the handler the verified chain of one that has one, refuses in the
// handshake one from another CA, and follows a replaced CA file.
func TestAskClientCertificates(t *testing.T) {
	dir := t.TempDir()
	caA, caB := testpki.NewCA(t, "ca-a"), testpki.NewCA(t, "ca-b")
	caFile := filepath.Join(dir, "client-ca.crt")
	writeFile(t, caFile, string(caA.PEM))
	certFile, keyFile := caA.Issue(t, "serving", testpki.Server).Write(t, dir, "tls")

	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	who := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
			w.Write([]byte("nobody"))
			return
		}
		w.Write([]byte(r.TLS.VerifiedChains[0][0].Subject.CommonName))
	})
	go func() {
		done <- ListenAndServe(ctx, Options{Addr: addr, CertFile: certFile, KeyFile: keyFile, AskClientCAFile: caFile}, who, slog.New(slog.DiscardHandler))
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ListenAndServe after cancel = %v", err)
		}
	})
	get := func(client *tls.Certificate) (string, error) {
		cfg := &tls.Config{RootCAs: caA.Pool(), ServerName: "127.0.0.1"}
		if client != nil {
			// Sent whatever CAs the server names: Go's client would keep a
			// certificate of another CA to itself.
			cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return client, nil }
		}
		tr := &http.Transport{TLSClientConfig: cfg}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get("https://" + addr + "/")
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		var b strings.Builder
		_, err = io.Copy(&b, resp.Body)
		return b.String(), err
	}
	waitServing(t, func() error { _, err := get(nil); return err })

	proxyA := caA.Issue(t, "proxy-a", testpki.Client).Pair(t)
	proxyB := caB.Issue(t, "proxy-b", testpki.Client).Pair(t)
	for _, c := range []struct {
		name string
		cert *tls.Certificate
		want string // "" = refused in the handshake
	}{
		{"no certificate", nil, "nobody"},
		{"the client CA's", &proxyA, "proxy-a"},
		{"another CA's", &proxyB, ""},
	} {
		got, err := get(c.cert)
		switch {
		case c.want == "" && err == nil:
			t.Errorf("%s: served %q, want refused in the handshake", c.name, got)
		case c.want != "" && (err != nil || got != c.want):
			t.Errorf("%s: %q, %v; want %q", c.name, got, err, c.want)
		}
	}

	writeFile(t, caFile, string(caB.PEM))
	touch(t, caFile)
	if got, err := get(&proxyB); err != nil || got != "proxy-b" {
		t.Errorf("after the client CA changed to B: B's client: %q, %v; want proxy-b", got, err)
	}
	if got, err := get(&proxyA); err == nil {
		t.Errorf("after the client CA changed to B: A's client served %q, want refused", got)
	}
}

// With names, a listener that asks for client certificates still serves a
// client without one, serves the named proxy (by CN or by DNS SAN), and
// refuses in the handshake a certificate of the same CA that names another
// client: a CA that signs for a whole mesh does not make every pod a proxy.
func TestAskClientCertificatesPinsNames(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, "mesh-ca")
	caFile := filepath.Join(dir, "client-ca.crt")
	writeFile(t, caFile, string(ca.PEM))
	certFile, keyFile := ca.Issue(t, "serving", testpki.Server).Write(t, dir, "tls")
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	who := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
			w.Write([]byte("nobody"))
			return
		}
		w.Write([]byte(r.TLS.VerifiedChains[0][0].Subject.CommonName))
	})
	go func() {
		done <- ListenAndServe(ctx, Options{Addr: addr, CertFile: certFile, KeyFile: keyFile, AskClientCAFile: caFile,
			ClientNames: []string{"oauth2-proxy", "sso.example"}}, who, slog.New(slog.DiscardHandler))
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ListenAndServe after cancel = %v", err)
		}
	})
	get := func(client *tls.Certificate) (string, error) {
		cfg := &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"}
		if client != nil {
			cfg.Certificates = []tls.Certificate{*client}
		}
		tr := &http.Transport{TLSClientConfig: cfg}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get("https://" + addr + "/")
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		var b strings.Builder
		_, err = io.Copy(&b, resp.Body)
		return b.String(), err
	}
	waitServing(t, func() error { _, err := get(nil); return err })
	byCN := ca.Issue(t, "oauth2-proxy", testpki.Client).Pair(t)
	bySAN := ca.Issue(t, "proxy-7f9c", testpki.Client, "sso.example").Pair(t)
	meshPod := ca.Issue(t, "some-pod", testpki.Client, "some-pod.tenant.svc").Pair(t)
	for _, c := range []struct {
		name string
		cert *tls.Certificate
		want string // "" = refused in the handshake
	}{
		{"no certificate", nil, "nobody"},
		{"the proxy by CN", &byCN, "oauth2-proxy"},
		{"the proxy by DNS SAN", &bySAN, "proxy-7f9c"},
		{"another client of the same CA", &meshPod, ""},
	} {
		got, err := get(c.cert)
		switch {
		case c.want == "" && err == nil:
			t.Errorf("%s: served %q, want refused in the handshake", c.name, got)
		case c.want != "" && (err != nil || got != c.want):
			t.Errorf("%s: %q, %v; want %q", c.name, got, err, c.want)
		}
	}
}

func TestAskClientCAOptionsRefused(t *testing.T) {
	for name, o := range map[string]Options{
		"over plain HTTP":    {Addr: "127.0.0.1:0", InsecureHTTP: true, AskClientCAFile: "ca"},
		"with a required CA": {Addr: "127.0.0.1:0", CertFile: "c", KeyFile: "k", ClientCAFile: "ca", AskClientCAFile: "ca"},
	} {
		if err := o.Validate(); err == nil {
			t.Errorf("%s: Validate = nil, want an error", name)
		}
	}
}

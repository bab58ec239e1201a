package fleet

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/testpki"
)

// A spoke's client opens its HTTP/2 connection with a per-stream window of
// streamWindow, not Go's 4 MiB, as the server sees it in the SETTINGS frame
// that follows the client's preface; and its transport, its own rather than
// client-go's, still trusts only the spoke's CA.
func TestSpokeClientAdvertisesTheStreamWindow(t *testing.T) {
	ca := testpki.NewCA(t, "spoke CA")
	leaf := ca.Issue(t, "spoke", testpki.Server)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{leaf.Pair(t)}, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	list := func(caFile string) <-chan error {
		t.Helper()
		tokenFile := filepath.Join(t.TempDir(), "token")
		writeToken(t, tokenFile, "token-a")
		cs := newClientsT(t, profile.ClusterEntry{Name: "wharf", Server: "https://" + ln.Addr().String(), CAFile: caFile, TokenFile: tokenFile})
		c, _ := cs.Get("wharf")
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		t.Cleanup(cancel)
		done := make(chan error, 1)
		go func() { // never answered: the server below reads only the preface
			_, err := c.Kube.CoreV1().Pods("loops").List(ctx, metav1.ListOptions{})
			done <- err
		}()
		return done
	}
	accept := func() *tls.Conn {
		t.Helper()
		conn, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		tc := conn.(*tls.Conn)
		_ = tc.SetDeadline(time.Now().Add(time.Minute))
		return tc
	}

	t.Run("window", func(t *testing.T) {
		list(ca.Write(t, t.TempDir(), "ca.crt"))
		tc := accept()
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
		if proto := tc.ConnectionState().NegotiatedProtocol; proto != "h2" {
			t.Fatalf("negotiated %q, want h2", proto)
		}
		preface := make([]byte, len(http2.ClientPreface))
		if _, err := io.ReadFull(tc, preface); err != nil || string(preface) != http2.ClientPreface {
			t.Fatalf("preface %q, %v", preface, err)
		}
		f, err := http2.NewFramer(nil, tc).ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		settings, ok := f.(*http2.SettingsFrame)
		if !ok {
			t.Fatalf("first frame %v, want SETTINGS", f.Header())
		}
		if got, ok := settings.Value(http2.SettingInitialWindowSize); !ok || got != streamWindow {
			t.Errorf("SETTINGS_INITIAL_WINDOW_SIZE = %d (sent %v), want %d", got, ok, streamWindow)
		}
	})

	t.Run("another CA", func(t *testing.T) {
		other := testpki.NewCA(t, "someone else's CA")
		done := list(other.Write(t, t.TempDir(), "ca.crt"))
		tc := accept()
		if err := tc.Handshake(); err == nil {
			t.Error("the handshake with a client trusting another CA succeeded")
		}
		if err := <-done; err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("list = %v, want a certificate error", err)
		}
	})
}

// Spokes whose TLS settings are the same share one windowed transport, as
// client-go's transport cache had them share theirs: two spokes of one API
// server, their CA files at two paths with the same CA, reach it over one
// HTTP/2 connection. A CA file rewritten with another CA is another
// transport, so a spoke added after a rotation trusts the new CA.
func TestSpokesOfOneServerShareAConnection(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeStatus(w, http.StatusNotFound)
	}))
	srv.EnableHTTP2 = true
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	writeCA := func(path string, pem []byte) {
		t.Helper()
		if err := os.WriteFile(path, pem, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	entry := func(name string) profile.ClusterEntry {
		dir := t.TempDir()
		caFile, tokenFile := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "token")
		writeCA(caFile, caPEM)
		writeToken(t, tokenFile, "token-"+name)
		return profile.ClusterEntry{Name: name, Server: srv.URL, CAFile: caFile, TokenFile: tokenFile}
	}
	cs := newClientsT(t, entry("wharf"), entry("dock"))
	for _, name := range []string{"wharf", "dock", "wharf"} {
		c, _ := cs.Get(name)
		resp, err := c.HTTP.Get(srv.URL + "/version")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Fatalf("%s: answered over %s, want HTTP/2", name, resp.Proto)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("two spokes of one API server opened %d connections, want 1", n)
	}

	path := filepath.Join(t.TempDir(), "ca.crt")
	writeCA(path, caPEM)
	cfg := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{CAFile: path}}
	first, err := windowedTransport(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := windowedTransport(cfg); err != nil || again != first {
		t.Errorf("the same CA again: a transport of its own (%v)", err)
	}
	writeCA(path, testpki.NewCA(t, "rotated CA").PEM)
	if rotated, err := windowedTransport(cfg); err != nil || rotated == first {
		t.Errorf("the CA file rotated: the old CA's transport (%v)", err)
	}
}

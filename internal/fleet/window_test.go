package fleet

import (
	"context"
	"crypto/tls"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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

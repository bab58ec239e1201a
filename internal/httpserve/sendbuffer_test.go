package httpserve

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// A request that owns its connection (HTTP/1.1, over TLS or not) gets the
// send buffer it asks for, as the kernel reports it back (Linux doubles
// what is asked, socket(7)); an HTTP/2 request, whose connection carries
// other streams, is refused and its connection left alone.
func TestLimitSendBuffer(t *testing.T) {
	const asked = 64 << 10
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	ca := writeServingCert(t, certFile, keyFile)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		applied := LimitSendBuffer(r, asked)
		c, _ := r.Context().Value(connKey{}).(net.Conn)
		if tc, ok := c.(*tls.Conn); ok {
			c = tc.NetConn()
		}
		fmt.Fprintf(w, "%s %v %d", r.Proto, applied, sendBuffer(t, c))
	})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	plain, secure := freeAddr(t), freeAddr(t)
	done := make(chan error, 2)
	go func() {
		done <- ListenAndServe(ctx, Options{Addr: plain, InsecureHTTP: true}, handler, slog.New(slog.DiscardHandler))
	}()
	go func() {
		done <- ListenAndServe(ctx, Options{Addr: secure, CertFile: certFile, KeyFile: keyFile}, handler, slog.New(slog.DiscardHandler))
	}()

	for _, tt := range []struct {
		name, url string
		transport *http.Transport
		proto     string
		// applied: LimitSendBuffer says it set the buffer, and the kernel
		// reports what was asked; otherwise both say it was left alone.
		applied bool
	}{
		{"HTTP/1.1", "http://" + plain, &http.Transport{}, "HTTP/1.1", true},
		{"HTTP/1.1 over TLS", "https://" + secure, &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca},
			TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}, "HTTP/1.1", true},
		{"HTTP/2", "https://" + secure, &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca}, ForceAttemptHTTP2: true}, "HTTP/2.0", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			client := &http.Client{Transport: tt.transport, Timeout: 5 * time.Second}
			defer tt.transport.CloseIdleConnections()
			var body []byte
			var err error
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				var resp *http.Response
				if resp, err = client.Get(tt.url + "/"); err == nil {
					body, _ = io.ReadAll(resp.Body)
					resp.Body.Close()
					break
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			var proto string
			var applied bool
			var buffer int
			if _, err := fmt.Sscan(string(body), &proto, &applied, &buffer); err != nil {
				t.Fatalf("answer %q: %v", body, err)
			}
			if proto != tt.proto || applied != tt.applied {
				t.Errorf("%s: LimitSendBuffer = %v, want %v on %s", proto, applied, tt.applied, tt.proto)
			}
			// Linux doubles what is asked (socket(7)); left alone, the buffer
			// is the kernel's autotuned one, whatever that is, not what was asked.
			if set := buffer == 2*asked; set != tt.applied {
				t.Errorf("SO_SNDBUF = %d, want it set to 2 × %d: %v", buffer, asked, tt.applied)
			}
		})
	}
	cancel()
	for range 2 {
		if err := <-done; err != nil {
			t.Errorf("ListenAndServe after cancel = %v", err)
		}
	}
}

// A request on a server this package did not make carries no connection
// to tune.
func TestLimitSendBufferWithoutConnection(t *testing.T) {
	r, _ := http.NewRequest(http.MethodGet, "http://localhost/", nil)
	r.ProtoMajor, r.ProtoMinor = 1, 1
	if LimitSendBuffer(r, 64<<10) {
		t.Error("LimitSendBuffer on a request without a recorded connection = true")
	}
}

// sendBuffer is c's SO_SNDBUF as the kernel reports it.
func sendBuffer(t *testing.T, c net.Conn) int {
	tcp, ok := c.(*net.TCPConn)
	if !ok {
		t.Errorf("connection %T is not TCP", c)
		return -1
	}
	rc, err := tcp.SyscallConn()
	if err != nil {
		t.Error(err)
		return -1
	}
	var n int
	var serr error
	if err := rc.Control(func(fd uintptr) { n, serr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF) }); err != nil || serr != nil {
		t.Error(err, serr)
	}
	return n
}

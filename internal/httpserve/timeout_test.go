package httpserve

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestNoReadTimeout: a body trickled for longer than the whole-request read
// timeout is cut on a default listener and read whole with NoReadTimeout;
// slow headers are cut on both.
func TestNoReadTimeout(t *testing.T) {
	oldHeader, oldRead := readHeaderTimeout, readTimeout
	readHeaderTimeout, readTimeout = 300*time.Millisecond, 300*time.Millisecond
	t.Cleanup(func() { readHeaderTimeout, readTimeout = oldHeader, oldRead })

	echoLen := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte{byte(n)})
	})
	serve := func(opts Options) string {
		t.Helper()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := newServer(opts, echoLen, slog.New(slog.DiscardHandler))
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { srv.Close() })
		return ln.Addr().String()
	}
	// trickle sends 10 bytes over ~1 s (three read timeouts).
	trickle := func(addr string) (int, error) {
		pr, pw := io.Pipe()
		go func() {
			for range 10 {
				time.Sleep(100 * time.Millisecond)
				if _, err := pw.Write([]byte("x")); err != nil {
					return
				}
			}
			pw.Close()
		}()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/", pr)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusOK || len(body) != 1 {
			return res.StatusCode, errors.New("body not read whole")
		}
		return int(body[0]), nil
	}
	if n, err := trickle(serve(Options{Name: "internal"})); err == nil {
		t.Errorf("default listener read a slow body whole (%d bytes): no whole-request timeout", n)
	}
	if n, err := trickle(serve(Options{Name: "external", NoReadTimeout: true})); err != nil || n != 10 {
		t.Errorf("NoReadTimeout listener: %d bytes, %v; want 10, nil", n, err)
	}

	// Slow headers: the connection is closed before the request completes.
	for _, opts := range []Options{{Name: "internal"}, {Name: "external", NoReadTimeout: true}} {
		conn, err := net.Dial("tcp", serve(opts))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.Write([]byte("POST / HTTP/1.1\r\nHost: x\r\n")); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		got, _ := io.ReadAll(conn) // returns when the server closes
		if bytes.Contains(got, []byte("200 OK")) {
			t.Errorf("%s: a request with unfinished headers was served: %q", opts.Name, got)
		}
		var ne net.Error
		if _, err := conn.Read(make([]byte, 1)); errors.As(err, &ne) && ne.Timeout() {
			t.Errorf("%s: the server kept a slow-header connection open", opts.Name)
		}
	}
}

package controller

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestPprofListenError: only HOST:PORT with a loopback host and a real port
// is accepted; every refusal names the flag.
func TestPprofListenError(t *testing.T) {
	tests := []struct {
		addr        string
		ok          bool
		notLoopback bool
	}{
		{"127.0.0.1:6060", true, false},
		{"127.0.0.2:1", true, false},
		{"[::1]:65535", true, false},
		{"localhost:6060", true, false},
		{":6060", false, true}, // every interface
		{"0.0.0.0:6060", false, true},
		{"[::]:6060", false, true},
		{"10.0.0.1:6060", false, true},
		{"example.com:6060", false, true},
		{"127.0.0.1.nip.io:6060", false, true},
		{"LOCALHOST:6060", false, true},
		{"[::ffff:10.0.0.1]:6060", false, true},
		{"", false, false},
		{"127.0.0.1", false, false},
		{"::1:6060", false, false},
		{"127.0.0.1:", false, false},
		{"127.0.0.1:0", false, false},
		{"127.0.0.1:65536", false, false},
		{"127.0.0.1:-1", false, false},
		{"127.0.0.1:+80", false, false},
		{"127.0.0.1:http", false, false},
		{"127.0.0.1:6060 ", false, false},
		{"127.0.0.1:6060\n", false, false},
		{"http://127.0.0.1:6060", false, false},
		{"127.0.0.1:6060/debug", false, false},
		{strings.Repeat("a", 1<<16) + ":6060", false, true},
		{"127.0.0.1:" + strings.Repeat("9", 1<<16), false, false},
	}
	for _, tt := range tests {
		err := pprofListenError(tt.addr)
		name := tt.addr
		if len(name) > 40 {
			name = name[:40] + "…"
		}
		switch {
		case tt.ok && err != nil:
			t.Errorf("%q: refused: %v", name, err)
		case !tt.ok && err == nil:
			t.Errorf("%q: accepted", name)
		case err != nil && !strings.HasPrefix(err.Error(), "--pprof-listen "):
			t.Errorf("%q: error does not name the flag: %v", name, err)
		case errors.Is(err, errPprofNotLoopback) != tt.notLoopback:
			t.Errorf("%q: errors.Is(err, errPprofNotLoopback) = %v, want %v (%v)", name, !tt.notLoopback, tt.notLoopback, err)
		}
	}
}

// TestControllerPprofFlag: a bad --pprof-listen is refused before the
// profile is even read; a missing value is a usage error.
func TestControllerPprofFlag(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--pprof-listen", "0.0.0.0:6060", "--config", "/nonexistent/crucible.toml"}, "--pprof-listen \"0.0.0.0:6060\": must be a loopback address"},
		{[]string{"--pprof-listen=:6060", "--config", "/nonexistent/crucible.toml"}, "--pprof-listen \":6060\": must be a loopback address"},
		{[]string{"--pprof-listen", "127.0.0.1", "--config", "/nonexistent/crucible.toml"}, "--pprof-listen \"127.0.0.1\": want HOST:PORT"},
		{[]string{"--pprof-listen"}, "flag needs an argument: --pprof-listen"},
	}
	for _, tt := range tests {
		cmd := NewCommand()
		cmd.SetArgs(tt.args)
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		err := cmd.ExecuteContext(t.Context())
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("controller %q: error %v, want one containing %q", tt.args, err, tt.want)
		}
	}
}

// TestWithPprof: the profiler is served on its own listener while the
// controller runs, to an IP literal or an allowed name but not to a Host a
// DNS-rebinding page would send, and goes when the controller returns; a
// listener that cannot listen stops the controller with an error naming the
// flag.
func TestWithPprof(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	addr := freeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	errStopped := errors.New("controller stopped")
	err := withPprof(t.Context(), addr, []string{"localhost"}, log, func(ctx context.Context) error {
		status, err := getWithin(ctx, "http://"+addr+"/debug/pprof/heap?debug=1")
		if err != nil || status != http.StatusOK {
			t.Errorf("GET /debug/pprof/heap while running = %d, %v; want 200", status, err)
		}
		for host, want := range map[string]int{"localhost:" + port: http.StatusOK, "rebind.example:" + port: http.StatusMisdirectedRequest} {
			if status, err := getHost(ctx, "http://"+addr+"/debug/pprof/heap?debug=1", host); err != nil || status != want {
				t.Errorf("GET /debug/pprof/heap with Host %s = %d, %v; want %d", host, status, err, want)
			}
		}
		return errStopped
	})
	if !errors.Is(err, errStopped) {
		t.Errorf("withPprof = %v, want the controller's error", err)
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Error("the profiler still listens after the controller returned")
	}

	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cancelled := false
	err = withPprof(t.Context(), taken.Addr().String(), nil, log, func(ctx context.Context) error {
		<-ctx.Done()
		cancelled = true
		return nil
	})
	if err == nil || !strings.HasPrefix(err.Error(), "--pprof-listen: ") || !cancelled {
		t.Errorf("withPprof on a taken port = %v (controller cancelled: %v), want an --pprof-listen error and the controller stopped", err, cancelled)
	}
}

// getWithin GETs url, retrying until the listener is up or ctx (bounded to
// ten seconds) ends.
func getWithin(ctx context.Context, url string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return 0, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode, nil
		}
		select {
		case <-ctx.Done():
			return 0, err
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// getHost GETs url once with the Host header host and returns the status.
func getHost(ctx context.Context, url, host string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

package controller

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"crucible.dev/crucible/internal/profile"
)

// TestMetricsListenerHosts: the controller's metrics listener, as its
// runnables start it, refuses a Host a DNS-rebinding page would send (its
// own name, or one under localhost's) with 421 and serves the scrape to an
// IP literal, to localhost and to a name the profile lists.
func TestMetricsListenerHosts(t *testing.T) {
	addr := freeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	p := &profile.Profile{Controller: profile.Controller{MetricsListen: addr, MetricsAllowedHosts: append(profile.DefaultMetricsAllowedHosts(), "prometheus-target.example")}}
	var metricsLn runnable
	for _, r := range (&parts{p: p, log: slog.New(slog.DiscardHandler)}).runnables() {
		if l, ok := r.(listener); ok && l.opts.Name == "metrics" {
			metricsLn = l
		}
	}
	if metricsLn == nil {
		t.Fatal("no metrics listener among the runnables")
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- metricsLn.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("metrics listener after cancel = %v", err)
		}
	})

	tests := []struct {
		host     string
		want     int
		wantBody string
	}{
		{"rebind.example:" + port, http.StatusMisdirectedRequest, "its names are set by controller.metrics_allowed_hosts\n"},
		{"localhost.rebind.example:" + port, http.StatusMisdirectedRequest, "its names are set by controller.metrics_allowed_hosts\n"},
		{addr, http.StatusOK, "go_goroutines"},
		{"LOCALHOST:" + port, http.StatusOK, "go_goroutines"},
		{"prometheus-target.example:" + port, http.StatusOK, "go_goroutines"},
	}
	client := &http.Client{Timeout: 5 * time.Second}
	for i, tt := range tests {
		var code int
		var body string
		var err error
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			code, body, err = getWithHost(t, client, "http://"+addr+"/metrics", tt.host)
			if err == nil || i > 0 || time.Now().After(deadline) {
				break // only the first request waits for the listener to come up
			}
		}
		if err != nil {
			t.Fatalf("GET /metrics with Host %s: %v", tt.host, err)
		}
		if code != tt.want || !strings.Contains(body, tt.wantBody) {
			t.Errorf("GET /metrics with Host %s = %d %.200q, want %d with %q", tt.host, code, body, tt.want, tt.wantBody)
		}
	}
}

// getWithHost GETs url with the Host header host, and returns the status
// and the body.
func getWithHost(t *testing.T, client *http.Client, url, host string) (int, string, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	req.Host = host
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
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

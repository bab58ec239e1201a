package httpserve

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const refusedBody = "this listener does not answer to that Host header; its names are set by controller.metrics_allowed_hosts\n"

// TestRequireHost: IP literals and the listed names pass, with any port,
// in any ASCII case and with a trailing dot; every other Host, a missing one
// and a malformed one get 421 before the handler runs, with a body that
// repeats nothing of the request.
func TestRequireHost(t *testing.T) {
	defaults := []string{"localhost"}
	custom := []string{"localhost", "Metrics.Example.", "kube.internal"}
	tests := []struct {
		name  string
		names []string
		host  string
		want  bool
	}{
		{"localhost", defaults, "localhost", true},
		{"upper case with a port", defaults, "LOCALHOST:9090", true},
		{"trailing dot", defaults, "localhost.", true},
		{"trailing dot and a port", defaults, "localhost.:9090", true},
		{"empty port", defaults, "localhost:", true},
		{"IPv4 with a port", defaults, "127.0.0.1:9090", true},
		{"IPv4", defaults, "127.0.0.1", true},
		{"IPv4 of the pod", defaults, "10.1.2.3:9090", true},
		{"IPv6 in brackets with a port", defaults, "[::1]:9090", true},
		{"IPv6 in brackets", defaults, "[::1]", true},
		{"IPv4-mapped IPv6", defaults, "[::ffff:127.0.0.1]:80", true},
		{"IP literal with no names listed", nil, "127.0.0.1:9090", true},
		{"custom name", custom, "metrics.example:8080", true},
		{"custom name as listed, dot and case", custom, "METRICS.example.", true},

		{"rebinding name", defaults, "evil.example", false},
		{"rebinding name with a port", defaults, "evil.example:9090", false},
		{"allowed name as a prefix", defaults, "localhost.evil.example", false},
		{"allowed name as a suffix", defaults, "evil.localhost", false},
		{"IPv4 as a prefix", defaults, "127.0.0.1.rebind.example", false},
		{"two trailing dots", defaults, "localhost..", false},
		{"missing Host", defaults, "", false},
		{"a port only", defaults, ":9090", false},
		{"a colon only", defaults, ":", false},
		{"a dot only", defaults, ".", false},
		{"named port", defaults, "localhost:http", false},
		{"port with a sign", defaults, "localhost:-1", false},
		{"IPv6 without brackets", defaults, "::1", false},
		{"IPv4 in brackets", defaults, "[127.0.0.1]:9090", false},
		{"name in brackets", defaults, "[localhost]", false},
		{"IPv6 with a zone", defaults, "[fe80::1%25eth0]:9090", false},
		{"unclosed bracket", defaults, "[::1:9090", false},
		{"text after the bracket", defaults, "[::1]evil", false},
		{"short IPv4 form", defaults, "127.1", false},
		{"Unicode long s folding to an allowed name", defaults, "localho\u017ft", false},
		{"Kelvin sign folding to an allowed name", custom, "\u212aube.internal", false},
		{"listed name with no names listed", nil, "localhost", false},
		{"custom name not listed", defaults, "metrics.example", false},
		{"hostile long name", defaults, strings.Repeat("localhost.", 10000), false},
		{"hostile long port", defaults, "localhost:" + strings.Repeat("9", maxHostBytes), false},
		{"hostile long IPv6", defaults, "[" + strings.Repeat("0:", 1000) + ":1]", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reached := false
			h := RequireHost(tt.names, "controller.metrics_allowed_hosts", http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached = true }))
			r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
			r.Host = tt.host
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			if reached != tt.want {
				t.Errorf("Host %.40q: handler reached = %v, want %v", tt.host, reached, tt.want)
			}
			if tt.want {
				return
			}
			if rec.Code != http.StatusMisdirectedRequest {
				t.Errorf("Host %.40q: status %d, want 421", tt.host, rec.Code)
			}
			if diff := cmp.Diff(refusedBody, rec.Body.String()); diff != "" {
				t.Errorf("Host %.40q: body (-want +got):\n%s", tt.host, diff)
			}
		})
	}
}

// FuzzParseHost: whatever the Host, parseHost never panics; what it accepts
// is bounded, lower-case and an IP literal or a name without a colon; and
// no Host under another name, before or after, ever passes an allowlist of
// localhost alone.
func FuzzParseHost(f *testing.F) {
	for _, s := range []string{
		"localhost", "LOCALHOST:9090", "localhost.", "127.0.0.1:9090", "[::1]:9090", "[fe80::1%25eth0]:80",
		"evil.example", "localhost.evil.example", "", ":9090", "::1", "[127.0.0.1]", "[::1", "localhost:x",
		"\u212aube", "localho\u017ft", "\xff\xfe", strings.Repeat("a.", 200),
	} {
		f.Add(s)
	}
	onlyLocalhost := map[string]bool{"localhost": true}
	f.Fuzz(func(t *testing.T, hostport string) {
		host, isIP, ok := parseHost(hostport)
		if ok {
			if len(hostport) > maxHostBytes || host == "" || host != asciiLower(host) || strings.HasSuffix(host, ".") {
				t.Errorf("parseHost(%q) accepted host %q", hostport, host)
			}
			if !isIP && strings.Contains(host, ":") {
				t.Errorf("parseHost(%q) = name %q with a colon", hostport, host)
			}
			if again, againIP, againOK := parseHost(asciiUpper(hostport)); !againOK || againIP != isIP || asciiLower(again) != host {
				t.Errorf("parseHost(%q) = %q, %v; upper-cased = %q, %v, %v", hostport, host, isIP, again, againIP, againOK)
			}
		}
		for _, rebound := range []string{"rebind." + hostport, hostport + ".rebind.example"} {
			if hostAllowed(rebound, onlyLocalhost) {
				t.Errorf("Host %q passes an allowlist of localhost", rebound)
			}
		}
	})
}

// TestRequireHostListener: through a real plain-HTTP listener, a Host a
// rebinding page would send is refused, and so is an HTTP/1.0 request with
// no Host at all; the listener's IP and localhost are served.
func TestRequireHostListener(t *testing.T) {
	addr := freeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	h := RequireHost([]string{"localhost"}, "controller.metrics_allowed_hosts", healthz())
	go func() {
		done <- ListenAndServe(ctx, Options{Name: "metrics", Addr: addr, InsecureHTTP: true}, h, slog.New(slog.DiscardHandler))
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ListenAndServe after cancel = %v", err)
		}
	})
	client := &http.Client{Timeout: 5 * time.Second}
	get := func(host string) (int, string, error) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+addr+"/healthz", nil)
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
	waitServing(t, func() error { _, _, err := get(addr); return err })

	for _, c := range []struct {
		host string
		want int
	}{
		{"rebind.example:" + port, http.StatusMisdirectedRequest},
		{"localhost.rebind.example:" + port, http.StatusMisdirectedRequest},
		{addr, http.StatusOK},
		{"[::1]:" + port, http.StatusOK},
		{"localhost:" + port, http.StatusOK},
	} {
		code, body, err := get(c.host)
		if err != nil {
			t.Fatalf("GET with Host %s: %v", c.host, err)
		}
		if code != c.want {
			t.Errorf("GET with Host %s = %d %q, want %d", c.host, code, body, c.want)
		}
		if c.want != http.StatusOK && body != refusedBody {
			t.Errorf("GET with Host %s: body %q, want %q", c.host, body, refusedBody)
		}
	}

	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.0\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("HTTP/1.0 without Host: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("HTTP/1.0 without Host = %d, want 421", resp.StatusCode)
	}
}

// asciiUpper upper-cases a-z alone, as a client may send any Host.
func asciiUpper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - ('a' - 'A')
		}
	}
	return string(b)
}

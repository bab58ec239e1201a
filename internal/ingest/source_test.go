package ingest

import (
	"net/http"
	"testing"
	"time"
)

func TestParseHop(t *testing.T) {
	tests := []struct {
		in   string
		want string // "" when refused
	}{
		{"1.2.3.4", "1.2.3.4"},
		{" 1.2.3.4 ", "1.2.3.4"},
		{"1.2.3.4:5678", "1.2.3.4"},
		{"2001:db8::1", "2001:db8::1"},
		{"[2001:db8::1]", "2001:db8::1"},
		{"[2001:db8::1]:443", "2001:db8::1"},
		{"::ffff:1.2.3.4", "1.2.3.4"},
		{"[::ffff:1.2.3.4]:80", "1.2.3.4"},
		{"fe80::1%eth0", "fe80::1"},
		{"", ""},
		{"unknown", ""},
		{"1.2.3.4:", ""},
		{"1.2.3.4:99999", ""},
		{"[1.2.3.4]", ""},
		{"[2001:db8::1", ""},
		{"2001:db8::1]:443", ""},
		{"1.2.3.4.5", ""},
		{"_hidden", ""},
	}
	for _, tt := range tests {
		got, ok := parseHop(tt.in)
		switch {
		case tt.want == "" && ok:
			t.Errorf("parseHop(%q) = %v, want refused", tt.in, got)
		case tt.want != "" && (!ok || got.String() != tt.want):
			t.Errorf("parseHop(%q) = %v, %v; want %s", tt.in, got, ok, tt.want)
		}
	}
}

func TestSourceKey(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.TrustedProxies = []string{"10.0.0.0/8", "fd00::/8"}
	})
	tests := []struct {
		name, peer, xff, want string
	}{
		{"IPv4 peer", "192.0.2.1:1000", "", "192.0.2.1"},
		{"IPv4 peer, header ignored", "192.0.2.1:1000", "198.51.100.1", "192.0.2.1"},
		{"IPv6 peer by /64", "[2001:db8:1:2:aaaa::1]:1000", "", "2001:db8:1:2::/64"},
		{"IPv6 neighbour shares the /64", "[2001:db8:1:2:ffff::9]:1000", "", "2001:db8:1:2::/64"},
		{"IPv6 next /64", "[2001:db8:1:3::1]:1000", "", "2001:db8:1:3::/64"},
		{"v4-mapped peer", "[::ffff:192.0.2.7]:1000", "", "192.0.2.7"},
		{"trusted proxy, IPv4 hop with port", "10.0.0.1:1000", "198.51.100.1:5678", "198.51.100.1"},
		{"trusted proxy, bracketed IPv6 hop with port", "10.0.0.1:1000", "[2001:db8::1]:443", "2001:db8::/64"},
		{"trusted proxy, bare IPv6 hop", "10.0.0.1:1000", "2001:db8::1", "2001:db8::/64"},
		{"trusted IPv6 proxy", "[fd00::5]:1000", "198.51.100.2", "198.51.100.2"},
		{"chain of trusted proxies", "10.0.0.1:1000", "198.51.100.3, 10.0.0.9:80, [fd00::1]:443", "198.51.100.3"},
		{"client-written hops ignored", "10.0.0.1:1000", "203.0.113.7, 198.51.100.4", "198.51.100.4"},
		{"garbage stops at the last vouched address", "10.0.0.1:1000", "198.51.100.5, garbage, 10.0.0.7", "10.0.0.7"},
		{"garbage right of everything", "10.0.0.1:1000", "198.51.100.5, [nope]", "10.0.0.1"},
		{"trusted proxy without the header", "10.0.0.1:1000", "", "10.0.0.1"},
	}
	for _, tt := range tests {
		r := e.request(http.MethodPost, "/api/pods/wp-1/artifacts/result", "", nil)
		r.RemoteAddr = tt.peer
		if tt.xff != "" {
			r.Header.Set("X-Forwarded-For", tt.xff)
		}
		if got := e.h.sourceKey(r); got != tt.want {
			t.Errorf("%s: source %q, want %q", tt.name, got, tt.want)
		}
	}
	r := e.request(http.MethodPost, "/api/pods/wp-1/artifacts/result", "", nil)
	r.RemoteAddr = "10.0.0.1:1000"
	r.Header.Add("X-Forwarded-For", "198.51.100.8")
	r.Header.Add("X-Forwarded-For", "10.0.0.2")
	if got := e.h.sourceKey(r); got != "198.51.100.8" {
		t.Errorf("two X-Forwarded-For headers: source %q, want 198.51.100.8", got)
	}
}

// TestSourceBucketSpentByFailures: authenticated uploads from one address
// (pods behind one NAT) do not spend the per-source bucket; failed
// authentication does, and refuses only tokens no cluster signed.
func TestSourceBucketSpentByFailures(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.RatePerSource, o.RateBurst = 0.001, 2 })
	var tokens []string
	for i := range 5 {
		tokens = append(tokens, e.addPod(podName(i), "uid-"+podName(i)))
	}
	for round := range 3 {
		for i, tok := range tokens {
			if w := e.post(podName(i), "result", tok, []byte("x")); w.Code/100 != 2 {
				t.Fatalf("round %d pod %d: status %d, want 2xx", round, i, w.Code)
			}
		}
	}
	for i, want := range []int{401, 401, 429} {
		if w := e.post("wp-0", "result", "", nil); w.Code != want {
			t.Errorf("unauthenticated request %d: status %d, want %d", i, w.Code, want)
		}
	}
	// The bucket is empty now, but a valid upload never waits for it.
	if w := e.post("wp-0", "result", tokens[0], []byte("x")); w.Code != http.StatusOK {
		t.Errorf("valid upload from an exhausted source: status %d, want 200", w.Code)
	}
}

func podName(i int) string { return "wp-" + string(rune('0'+i)) }

// TestPerPodLimit: an authenticated pod is limited on its own; other pods
// from the same address are not.
func TestPerPodLimit(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.RatePerPod, o.RateBurstPerPod = 0.5, 2 })
	tok1 := e.addPod("wp-1", "uid-1")
	tok2 := e.addPod("wp-2", "uid-2")
	for i, want := range []int{201, 200, 429} {
		w := e.post("wp-1", "result", tok1, []byte("x"))
		if w.Code != want {
			t.Fatalf("wp-1 request %d: status %d, want %d", i, w.Code, want)
		}
		if want == 429 && w.Header().Get("Retry-After") != "2" {
			t.Errorf("Retry-After = %q, want 2", w.Header().Get("Retry-After"))
		}
	}
	if w := e.post("wp-2", "result", tok2, []byte("x")); w.Code != http.StatusCreated {
		t.Errorf("wp-2 while wp-1 is limited: status %d, want 201", w.Code)
	}
	e.clock.Step(2 * time.Second)
	if w := e.post("wp-1", "result", tok1, []byte("x")); w.Code != http.StatusOK {
		t.Errorf("wp-1 after refill: status %d, want 200", w.Code)
	}
}

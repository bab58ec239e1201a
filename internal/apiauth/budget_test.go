package apiauth

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	authenticationv1 "k8s.io/api/authentication/v1"
	testingclock "k8s.io/utils/clock/testing"

	"crucible.dev/crucible/internal/httperr"
	"crucible.dev/crucible/internal/metrics"
)

// from is a request with Authorization auth (none when "") from peer.
func from(peer, auth string) *http.Request {
	r := bearerRequest()
	if auth != "" {
		r.Header.Set("Authorization", auth)
	}
	r.RemoteAddr = peer
	return r
}

// code is the HTTP status an error of Authenticate is answered with.
func code(err error) int {
	switch {
	case err == nil:
		return http.StatusOK
	case errors.Is(err, ErrUnavailable):
		return http.StatusServiceUnavailable
	case errors.Is(err, ErrUnauthenticated):
		return http.StatusUnauthorized
	}
	return httperr.From(err).Code
}

// The failure budget's decisions, step by step on one clock: failures
// spend it, an empty one refuses unknown tokens and malformed bearers with
// 429 and no review, while cached and known-good tokens, callers without a
// header, other sources and hub outages are not refused by it.
func TestFailureBudget(t *testing.T) {
	clock := testingclock.NewFakeClock(time.Unix(1000, 0))
	rev := &fakeTokens{users: map[string]authenticationv1.UserInfo{"good": {Username: "alice"}, "new": {Username: "bob"}}}
	b := NewBearer(rev, 10*time.Second, 5*time.Second, 100).WithFailureBudget(0.01, 3, 100, slog.New(slog.DiscardHandler))
	b.now = clock.Now
	refused := testutil.ToFloat64(metrics.BudgetRefusals.WithLabelValues(BudgetAuthFailures))
	const nat = "192.0.2.1:4000"
	steps := []struct {
		name    string
		peer    string
		auth    string
		advance time.Duration
		code    int
		reviews int // total reviews after the step
	}{
		{"honest first: its spent failure is given back", nat, "Bearer good", 0, 200, 1},
		{"garbage 1", nat, "Bearer g1", 0, 401, 2},
		{"garbage 2", nat, "Bearer g2", 0, 401, 3},
		{"garbage 3 empties the bucket", nat, "Bearer g3", 0, 401, 4},
		{"garbage 4: 429 without a review", nat, "Bearer g4", 0, 429, 4},
		{"a cached rejection: 429", nat, "Bearer g1", 0, 429, 4},
		{"a malformed bearer: 429", nat, "Basic eA==", 0, 429, 4},
		{"no Authorization at all: still 401", nat, "", 0, 401, 4},
		{"the cached accept is never refused", nat, "Bearer good", 0, 200, 4},
		{"known-good after its accept expired: reviewed", nat, "Bearer good", 11 * time.Second, 200, 5},
		{"a valid token never seen from here: 429", nat, "Bearer new", 0, 429, 5},
		{"another address has its own bucket", "192.0.2.2:4000", "Bearer g5", 0, 401, 6},
		{"IPv6 ::1 fails", "[2001:db8::1]:1", "Bearer v1", 0, 401, 7},
		{"IPv6 ::1 fails", "[2001:db8::1]:1", "Bearer v2", 0, 401, 8},
		{"IPv6 ::1 fails", "[2001:db8::1]:1", "Bearer v3", 0, 401, 9},
		{"its /64 neighbour shares the bucket", "[2001:db8::2]:1", "Bearer v4", 0, 429, 9},
		{"the next /64 does not", "[2001:db8:0:1::1]:1", "Bearer v5", 0, 401, 10},
		{"a failure accrues back at the rate", nat, "Bearer g6", 100 * time.Second, 401, 11},
		{"and is spent", nat, "Bearer g7", 0, 429, 11},
	}
	var want429 float64
	for i, s := range steps {
		clock.Step(s.advance)
		_, err := b.Authenticate(from(s.peer, s.auth))
		if got := code(err); got != s.code || rev.calls != s.reviews {
			t.Fatalf("step %d (%s): %d (%v), %d reviews; want %d, %d reviews", i, s.name, got, err, rev.calls, s.code, s.reviews)
		}
		if s.code == 429 {
			want429++
			he := httperr.From(err)
			if he.Header.Get("Retry-After") == "" || !strings.Contains(he.Msg, "api.auth_failures_per_source") || strings.Contains(he.Msg, s.auth) {
				t.Fatalf("step %d (%s): 429 %q, headers %v; want Retry-After and the key named, never the token", i, s.name, he.Msg, he.Header)
			}
		}
	}
	if got := testutil.ToFloat64(metrics.BudgetRefusals.WithLabelValues(BudgetAuthFailures)) - refused; got != want429 {
		t.Errorf("crucible_budget_refusals_total{budget=%q} grew by %v, want %v", BudgetAuthFailures, got, want429)
	}
}

// A hub that does not answer is not the caller's failure: the spent
// failure is given back, so an outage never turns into 429s.
func TestFailureBudgetOutage(t *testing.T) {
	rev := &fakeTokens{err: errors.New("connection refused")}
	b := NewBearer(rev, time.Second, time.Second, 10).WithFailureBudget(0.001, 1, 10, slog.New(slog.DiscardHandler))
	for i := range 3 {
		if _, err := b.Authenticate(from("192.0.2.1:1", fmt.Sprintf("Bearer t%d", i))); code(err) != 503 {
			t.Fatalf("request %d with the hub down: %v, want 503", i, err)
		}
	}
}

// Concurrent garbage cannot outrun the budget: each unknown token spends
// its failure before the review, so burst garbage bearers at once cost at
// most burst reviews.
func TestFailureBudgetConcurrent(t *testing.T) {
	rev := &fakeTokens{}
	const burst, n = 5, 100
	b := NewBearer(rev, time.Minute, time.Minute, 1000).WithFailureBudget(0.001, burst, 10, slog.New(slog.DiscardHandler))
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for i := range n {
		wg.Go(func() {
			_, err := b.Authenticate(from("192.0.2.9:1", fmt.Sprintf("Bearer garbage-%d", i)))
			mu.Lock()
			codes[code(err)]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if rev.calls != burst || codes[401] != burst || codes[429] != n-burst {
		t.Errorf("%d concurrent garbage bearers: %d reviews, answers %v; want %d reviews, %d × 401, %d × 429", n, rev.calls, codes, burst, burst, n-burst)
	}
}

func TestSourceKey(t *testing.T) {
	for peer, want := range map[string]string{
		"192.0.2.1:80":               "192.0.2.1",
		"[::ffff:192.0.2.1]:80":      "192.0.2.1",
		"[2001:db8::1]:80":           "2001:db8::/64",
		"[2001:db8::ffff:1]:443":     "2001:db8::/64",
		"[fe80::1%eth0]:80":          "fe80::/64",
		"[2001:db8:0:7:1:2:3:4]:443": "2001:db8:0:7::/64",
		"not an address":             "not an address",
	} {
		if got := SourceKey(from(peer, "")); got != want {
			t.Errorf("SourceKey(%q) = %q, want %q", peer, got, want)
		}
	}
}

// The proxy's headers count only from a trusted address that also
// presented a verified client certificate; without headers nobody is named.
func TestProxyClientCert(t *testing.T) {
	p := &Proxy{Trusted: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}, UserHeader: "X-Auth-Request-User",
		GroupsHeader: "X-Auth-Request-Groups", RequireClientCert: true}
	leaf := &x509.Certificate{}
	verified := &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}, VerifiedChains: [][]*x509.Certificate{{leaf}}}
	tests := []struct {
		name    string
		peer    string
		tls     *tls.ConnectionState
		user    string
		wantErr string
	}{
		{"trusted with a verified certificate", "10.0.0.7:1", verified, "alice", ""},
		{"trusted, no TLS", "10.0.0.7:1", nil, "alice", "identity headers from 10.0.0.7 without a verified client certificate (api.proxy_client_ca)"},
		{"trusted, TLS without a certificate", "10.0.0.7:1", &tls.ConnectionState{}, "alice", "without a verified client certificate"},
		{"trusted, an unverified certificate", "10.0.0.7:1", &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}, "alice", "without a verified client certificate"},
		{"a verified certificate from elsewhere", "10.0.1.7:1", verified, "alice", "identity headers from 10.0.1.7, which is not a trusted proxy"},
		{"no headers, no certificate", "10.0.0.7:1", nil, "", "requests must come through the SSO proxy"},
		{"no headers from elsewhere", "192.0.2.1:1", nil, "", "requests must come through the SSO proxy"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := from(tc.peer, "")
			r.TLS = tc.tls
			if tc.user != "" {
				r.Header.Set("X-Auth-Request-User", tc.user)
			}
			id, err := p.Authenticate(r)
			switch {
			case tc.wantErr == "" && (err != nil || id.User != tc.user):
				t.Errorf("= %+v, %v; want %s", id, err, tc.user)
			case tc.wantErr != "" && (!errors.Is(err, ErrUnauthenticated) || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("= %+v, %v; want ErrUnauthenticated with %q", id, err, tc.wantErr)
			}
		})
	}
	p.RequireClientCert = false
	if id, err := p.Authenticate(func() *http.Request {
		r := from("10.0.0.7:1", "")
		r.Header.Set("X-Auth-Request-User", "alice")
		return r
	}()); err != nil || id.User != "alice" {
		t.Errorf("without proxy_client_ca the address suffices: %+v, %v", id, err)
	}
}

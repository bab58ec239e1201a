package ingest

import (
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"crucible.dev/crucible/internal/metrics"
)

// TestGarbageDoesNotLockOutPods (issue 23, finding 3): behind an ingress
// every client shares one address. 1,000 garbage requests from it spend
// its bucket — past the burst they are answered 429, and none costs a
// TokenReview — yet a pod's upload from the same address is 201, and a
// token a spoke signed is answered on its merits, never 429.
func TestGarbageDoesNotLockOutPods(t *testing.T) {
	const burst, flood = 20, 1000
	e := newEnv(t, func(o *Options) { o.RatePerSource, o.RateBurst = 0.001, burst })
	tok := e.addPod("wp-1", "uid-1")
	forged := sign(t, otherKey, testKID, podClaims(e.clock.Now(), "wp-1", "uid-1"))
	garbage := []string{"", "not-a-jwt", forged}
	limited := metrics.IngestRequests.WithLabelValues("rate_limited")
	limitedBefore := testutil.ToFloat64(limited)

	codes := map[int]int{}
	for i := range flood {
		codes[e.post("wp-1", "result", garbage[i%len(garbage)], []byte("x")).Code]++ // all from httptest's 192.0.2.1
	}
	if diff := cmp.Diff(map[int]int{401: burst, 429: flood - burst}, codes); diff != "" {
		t.Errorf("garbage answers (-want +got):\n%s", diff)
	}
	if got := testutil.ToFloat64(limited) - limitedBefore; got != flood-burst {
		t.Errorf("rate_limited counted %v times, want %d", got, flood-burst)
	}
	if got := e.spoke.reviews.Load(); got != 0 {
		t.Errorf("TokenReviews for garbage = %d, want 0", got)
	}

	if w := e.post("wp-1", "result", tok, []byte("data")); w.Code != http.StatusCreated {
		t.Errorf("the pod's upload after the flood: status %d, want 201 (body %s)", w.Code, w.Body)
	}
	unknown := sign(t, spokeKey, testKID, podClaims(e.clock.Now(), "wp-9", "uid-9"))
	if w := e.post("wp-9", "result", unknown, []byte("data")); w.Code != http.StatusForbidden {
		t.Errorf("a signed token of an unknown pod after the flood: status %d, want 403", w.Code)
	}
	if got := e.spoke.reviews.Load(); got != 1 {
		t.Errorf("TokenReviews = %d, want 1 (the pod's)", got)
	}
}

// TestFinalRefusalsAreLocal (issue 23, finding 5): a token a spoke signed
// that can never pass its TokenReview — another issuer, or a pod uid that
// is not the row's (the pod was re-created under the same name) — is
// refused without a TokenReview and negative-cached. The spoke would word
// both as status.error (modeRejectError), which is a retryable 503.
func TestFinalRefusalsAreLocal(t *testing.T) {
	tests := []struct {
		name   string
		edit   func(*tokenClaims)
		want   int
		reason string
	}{
		{"another issuer", func(c *tokenClaims) { c.Iss = "https://issuer.example" }, http.StatusUnauthorized, "issuer"},
		{"no issuer", func(c *tokenClaims) { c.Iss = "" }, http.StatusUnauthorized, "issuer"},
		{"a re-created pod's token", func(c *tokenClaims) { c.Kube.Pod.UID = "uid-before" }, http.StatusForbidden, "pod_uid"},
		// Refused before the row is read, every time (no cache needed).
		{"bound to no pod", func(c *tokenClaims) { c.Kube.Pod.Name, c.Kube.Pod.UID = "", "" }, http.StatusForbidden, "pod_name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			e.addPod("wp-1", "uid-1")
			c := podClaims(e.clock.Now(), "wp-1", "uid-1")
			tt.edit(&c)
			tok := sign(t, spokeKey, testKID, c)
			e.spoke.setMode(tok, modeRejectError)
			rejects := metrics.IngestPrecheckRejects.WithLabelValues(tt.reason)
			hits := metrics.IngestCacheHits.WithLabelValues("negative")
			rejectsBefore, hitsBefore := testutil.ToFloat64(rejects), testutil.ToFloat64(hits)

			for i := range 2 {
				if w := e.post("wp-1", "result", tok, []byte("data")); w.Code != tt.want {
					t.Fatalf("request %d: status %d, want %d (body %s)", i, w.Code, tt.want, w.Body)
				}
			}
			if got := e.spoke.reviews.Load(); got != 0 {
				t.Errorf("TokenReviews = %d, want 0", got)
			}
			wantRejects, wantHits := 1.0, 1.0
			if tt.reason == "pod_name" {
				wantRejects, wantHits = 2, 0
			}
			if got := testutil.ToFloat64(rejects) - rejectsBefore; got != wantRejects {
				t.Errorf("pre-check rejects %q = %v, want %v", tt.reason, got, wantRejects)
			}
			if got := testutil.ToFloat64(hits) - hitsBefore; got != wantHits {
				t.Errorf("negative cache hits = %v, want %v (the repeat)", got, wantHits)
			}
		})
	}
}

// TestIssuerChangeIsNotRefused: the spoke's issuer is re-read when a token
// names another one, so a spoke whose issuer changed is not locked out by
// the one read with its keys; the re-read is rate-limited by
// JWKSMinRefresh.
func TestIssuerChangeIsNotRefused(t *testing.T) {
	e := newEnv(t)
	tok := e.addPod("wp-1", "uid-1")
	if w := e.post("wp-1", "result", tok, []byte("data")); w.Code != http.StatusCreated {
		t.Fatalf("first upload: status %d, want 201", w.Code)
	}
	e.spoke.setIssuer("https://spoke-a.example")
	c := podClaims(e.clock.Now(), "wp-1", "uid-1")
	c.Iss = "https://spoke-a.example"
	if w := e.post("wp-1", "other", sign(t, spokeKey, testKID, c), []byte("data")); w.Code != http.StatusCreated {
		t.Errorf("a token of the spoke's new issuer: status %d, want 201 (body %s)", w.Code, w.Body)
	}
	// The old issuer's tokens are refused now, and another mismatch
	// within JWKSMinRefresh does not re-read the document.
	c.Iss, c.Jti = testIssuer, "old"
	if w := e.post("wp-1", "third", sign(t, spokeKey, testKID, c), []byte("data")); w.Code != http.StatusUnauthorized {
		t.Errorf("a token of the spoke's old issuer: status %d, want 401", w.Code)
	}
	if got := e.spoke.reviews.Load(); got != 2 {
		t.Errorf("TokenReviews = %d, want 2", got)
	}
	if got := e.spoke.discoveries.Load(); got != 2 {
		t.Errorf("discovery reads = %d, want 2 (with the keys, and one re-read)", got)
	}
}

// TestIssuerUnknown: when the discovery document cannot be read the
// spoke's issuer is unknown, and a token is not refused for its iss: the
// TokenReview decides, as before issuers were compared.
func TestIssuerUnknown(t *testing.T) {
	e := newEnv(t)
	e.spoke.discoveryFail.Store(true)
	e.addPod("wp-1", "uid-1")
	c := podClaims(e.clock.Now(), "wp-1", "uid-1")
	c.Iss = "https://issuer.example"
	if w := e.post("wp-1", "result", sign(t, spokeKey, testKID, c), []byte("data")); w.Code != http.StatusCreated {
		t.Errorf("status %d, want 201 (body %s)", w.Code, w.Body)
	}
	if got := e.spoke.reviews.Load(); got != 1 {
		t.Errorf("TokenReviews = %d, want 1", got)
	}
}

package ingest

import (
	"crypto/elliptic"
	"net/http"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"crucible.dev/crucible/internal/jwt"
	"crucible.dev/crucible/internal/jwt/jwttest"
	"crucible.dev/crucible/internal/metrics"
)

// TestOneClusterDownIs503ForItsTokens: with two clusters, one whose keys
// cannot be fetched makes tokens that may be its own 503 (retryable), not
// 401, while the other cluster's uploads still succeed.
func TestOneClusterDownIs503ForItsTokens(t *testing.T) {
	e := newEnvClusters(t, 2)
	tokA := e.addPodOn(0, "wp-a", "uid-a")
	tokB := e.addPodOn(1, "wp-b", "uid-b")
	e.spokes[1].jwksFail.Store(true)

	w := e.post("wp-b", "result", tokB, []byte("b"))
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Errorf("pod on the down cluster: status %d, Retry-After %q; want 503 with Retry-After", w.Code, w.Header().Get("Retry-After"))
	}
	if w := e.post("wp-a", "result", tokA, []byte("a")); w.Code != http.StatusCreated {
		t.Errorf("pod on the healthy cluster: status %d, want 201", w.Code)
	}
	// A forged token naming the ingest audience might be the down
	// cluster's: no definitive answer either.
	forged := sign(t, otherKey, "rotated", podClaims(e.clock.Now(), "wp-b", "uid-b"))
	if w := e.post("wp-b", "result", forged, []byte("b")); w.Code != http.StatusServiceUnavailable {
		t.Errorf("unknown kid while a cluster is down: status %d, want 503", w.Code)
	}
	// A bad signature under A's kid: A's keys say no, but B's cannot say
	// whether a key of B's carries that kid, so still no definitive answer.
	badA := sign(t, otherKey, testSpokeKID[0], podClaims(e.clock.Now(), "wp-a", "uid-a"))
	if w := e.post("wp-a", "result", badA, []byte("a")); w.Code != http.StatusServiceUnavailable {
		t.Errorf("bad signature under A's kid while B is down: status %d, want 503", w.Code)
	}
	if got := e.spokes[1].reviews.Load(); got != 0 {
		t.Errorf("the down cluster got %d TokenReviews, want 0", got)
	}

	// The cluster recovers: its pod's token is accepted, forged ones are 401.
	e.spokes[1].jwksFail.Store(false)
	e.clock.Step(jwt.DefaultMinRefresh)
	if w := e.post("wp-b", "result", tokB, []byte("b")); w.Code != http.StatusCreated {
		t.Errorf("after recovery: status %d, want 201", w.Code)
	}
	if w := e.post("wp-b", "result", forged, []byte("b")); w.Code != http.StatusUnauthorized {
		t.Errorf("forged after recovery: status %d, want 401", w.Code)
	}
}

// TestTokenNeverCrossesClusters: a token signed by cluster A, presented for
// a pod whose row is on cluster B, is refused before any TokenReview.
func TestTokenNeverCrossesClusters(t *testing.T) {
	e := newEnvClusters(t, 2)
	e.addPodOn(0, "wp-a", "uid-a")
	e.addPodOn(1, "wp-b", "uid-b")
	// A pod on A with the name and uid of B's pod: a token A would vouch for.
	tokA := sign(t, testSpokeKey(0), testSpokeKID[0], podClaims(e.clock.Now(), "wp-b", "uid-b"))
	counter := metrics.IngestPrecheckRejects.WithLabelValues("cluster")
	before := testutil.ToFloat64(counter)

	w := e.post("wp-b", "result", tokA, []byte("x"))
	if w.Code != http.StatusUnauthorized {
		t.Errorf("A's token for B's pod: status %d, want 401", w.Code)
	}
	if diff := w.Body.String(); diff != e.post("wp-a", "result", "", nil).Body.String() {
		t.Errorf("cross-cluster 401 body %q differs from other 401s", diff)
	}
	for i, s := range e.spokes {
		if got := s.reviews.Load(); got != 0 {
			t.Errorf("cluster %s got %d TokenReviews, want 0", testClusters[i], got)
		}
	}
	if d := testutil.ToFloat64(counter) - before; d != 1 {
		t.Errorf("precheck rejects{reason=cluster} rose by %v, want 1", d)
	}
}

// TestReviewStatusErrorIsUnavailable: a TokenReview answer with
// status.error is 503 and never negative-cached.
func TestReviewStatusErrorIsUnavailable(t *testing.T) {
	e := newEnv(t)
	tok := e.addPod("wp-1", "uid-1")
	e.spoke.setMode(tok, modeRejectError)
	for i := range 3 {
		w := e.post("wp-1", "result", tok, []byte("data"))
		if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
			t.Fatalf("request %d: status %d, Retry-After %q; want 503 with Retry-After", i, w.Code, w.Header().Get("Retry-After"))
		}
	}
	if got := e.spoke.reviews.Load(); got != 3 {
		t.Errorf("TokenReviews = %d, want 3 (status.error is never cached)", got)
	}
	e.spoke.setMode(tok, modeVerify)
	if w := e.post("wp-1", "result", tok, []byte("data")); w.Code != http.StatusCreated {
		t.Errorf("after the spoke recovers: status %d, want 201", w.Code)
	}
	// authenticated:false without an error stays a cached no.
	e.clock.Step(time.Second)
	no := e.token("wp-1", "uid-1")
	e.spoke.setMode(no, modeReject)
	for range 2 {
		if w := e.post("wp-1", "result", no, []byte("data")); w.Code != http.StatusUnauthorized {
			t.Errorf("definitive no: status %d, want 401", w.Code)
		}
	}
	if got := e.spoke.reviews.Load(); got != 5 {
		t.Errorf("TokenReviews = %d, want 5 (the definitive no is cached)", got)
	}
}

// TestECTokens: kube-apiserver signs with ES384 and ES512 for P-384 and
// P-521 keys; the pre-check accepts them.
func TestECTokens(t *testing.T) {
	for _, tc := range []struct {
		curve elliptic.Curve
		alg   jose.SignatureAlgorithm
	}{{elliptic.P256(), jose.ES256}, {elliptic.P384(), jose.ES384}, {elliptic.P521(), jose.ES512}} {
		t.Run(string(tc.alg), func(t *testing.T) {
			e := newEnv(t)
			key := jwttest.ECKey(tc.curve)
			e.spoke.key = key // before the first request fetches the keys
			e.addPod("wp-1", "uid-1")
			tok := jwttest.Sign(t, key, tc.alg, testKID, podClaims(e.clock.Now(), "wp-1", "uid-1"), nil)
			if w := e.post("wp-1", "result", tok, []byte("x")); w.Code != http.StatusCreated {
				t.Errorf("status %d, want 201 (%s)", w.Code, w.Body)
			}
		})
	}
}

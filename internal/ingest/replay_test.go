package ingest

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"crucible.dev/crucible/internal/metrics"
)

// storeReads is crucible_ingest_store_reads_total now.
func storeReads() float64 { return testutil.ToFloat64(metrics.IngestStoreReads) }

// TestReplayedTokenIsRefusedBeforeTheStore (issue 37, deliverable 3): pod
// A's valid token, sent from one address for pod B and for unknown ids, is
// refused by its own pod claim: no row read, no TokenReview. Past the
// source's burst its refusals are 429 (a cap of their own), while pod A's
// and pod B's uploads from the same address are 201.
func TestReplayedTokenIsRefusedBeforeTheStore(t *testing.T) {
	const burst, n = 20, 1000
	e := newEnv(t, func(o *Options) { o.RatePerSource, o.RateBurst = 0.001, burst })
	tokA := e.addPod("wp-a", "uid-a")
	tokB := e.addPod("wp-b", "uid-b")
	rejects := metrics.IngestPrecheckRejects.WithLabelValues("pod_name")
	readsBefore, rejectsBefore := storeReads(), testutil.ToFloat64(rejects)

	codes := map[int]int{}
	for i := range n {
		target := "wp-b"
		if i%2 == 1 {
			target = fmt.Sprintf("nosuch-%d", i)
		}
		codes[e.post(target, "result", tokA, []byte("x")).Code]++ // all from httptest's 192.0.2.1
	}
	if diff := cmp.Diff(map[int]int{403: burst, 429: n - burst}, codes); diff != "" {
		t.Errorf("replay answers (-want +got):\n%s", diff)
	}
	if got := storeReads() - readsBefore; got != 0 {
		t.Errorf("%d replays read the store %v times, want 0", n, got)
	}
	if got := testutil.ToFloat64(rejects) - rejectsBefore; got != n {
		t.Errorf("pre-check rejects pod_name = %v, want %d", got, n)
	}
	if got := e.spoke.reviews.Load(); got != 0 {
		t.Errorf("TokenReviews = %d, want 0", got)
	}
	for _, p := range []struct{ id, tok string }{{"wp-a", tokA}, {"wp-b", tokB}} {
		if w := e.post(p.id, "result", p.tok, []byte("data of "+p.id)); w.Code != http.StatusCreated {
			t.Errorf("%s's own upload from the replays' address: status %d, want 201 (body %s)", p.id, w.Code, w.Body)
		}
	}
}

// TestUnknownPodIsNegativelyCached: a signed token bound to a pod id the
// store does not know (a spoke tenant's own pod, projected with the ingest
// audience) costs one read per negative TTL.
func TestUnknownPodIsNegativelyCached(t *testing.T) {
	e := newEnv(t)
	tok := e.token("wp-9", "uid-9")
	before := storeReads()
	for i := range 100 {
		if w := e.post("wp-9", "result", tok, []byte("x")); w.Code != http.StatusForbidden {
			t.Fatalf("request %d: status %d, want 403", i, w.Code)
		}
	}
	if got := storeReads() - before; got != 1 {
		t.Errorf("100 requests for an unknown pod read the store %v times, want 1", got)
	}
	e.clock.Step(e.h.opts.NegativeTTL + 1)
	if w := e.post("wp-9", "result", e.token("wp-9", "uid-9"), []byte("x")); w.Code != http.StatusForbidden {
		t.Errorf("after the negative TTL: status %d, want 403", w.Code)
	}
	if got := storeReads() - before; got != 2 {
		t.Errorf("after the negative TTL: %v store reads, want 2", got)
	}
}

// TestRefusedReadsAreBudgeted: what still needs the row — a token of the
// pod's predecessor (a stale uid), a token of a pod whose uid is not
// recorded yet — is charged to the token's bucket and its pod uid's: past
// the burst it is 429 without a read, another token of the same uid too,
// and the pod's own token is 201.
func TestRefusedReadsAreBudgeted(t *testing.T) {
	const burst = 5
	e := newEnv(t, func(o *Options) { o.RatePerPod, o.RateBurstPerPod = 0.001, burst })
	own := e.addPod("wp-1", "uid-2")
	e.addPod("wp-2", "")
	for _, tt := range []struct {
		name, pod, uid string
		refused        int
	}{
		{"stale uid", "wp-1", "uid-1", http.StatusForbidden},
		{"uid not recorded yet", "wp-2", "uid-3", http.StatusServiceUnavailable},
	} {
		before := storeReads()
		codes := map[int]int{}
		for range 50 {
			codes[e.post(tt.pod, "result", e.token(tt.pod, tt.uid), []byte("x")).Code]++ // one token, replayed
		}
		if diff := cmp.Diff(map[int]int{tt.refused: burst, 429: 50 - burst}, codes); diff != "" {
			t.Errorf("%s: answers (-want +got):\n%s", tt.name, diff)
		}
		if got := storeReads() - before; got != burst {
			t.Errorf("%s: 50 requests read the store %v times, want %d", tt.name, got, burst)
		}
		c := podClaims(e.clock.Now(), tt.pod, tt.uid)
		c.Jti = "another"
		if w := e.post(tt.pod, "result", sign(t, spokeKey, testKID, c), []byte("x")); w.Code != http.StatusTooManyRequests {
			t.Errorf("%s: another token of the same uid: status %d, want 429", tt.name, w.Code)
		}
	}
	if w := e.post("wp-1", "result", own, []byte("data")); w.Code != http.StatusCreated {
		t.Errorf("the pod's own upload: status %d, want 201 (body %s)", w.Code, w.Body)
	}
}

// TestCachedForbiddenLogsOnce (issue 37, low): a token its spoke
// authenticated as another identity is logged at Info once a minute, not
// on every request its cached verdict answers.
func TestCachedForbiddenLogsOnce(t *testing.T) {
	e := newEnv(t)
	e.addPod("wp-1", "uid-1")
	c := podClaims(e.clock.Now(), "wp-1", "uid-1")
	c.Sub = "system:serviceaccount:" + testNS + ":other"
	tok := sign(t, spokeKey, testKID, c)
	for i := range 50 {
		if w := e.post("wp-1", "result", tok, []byte("x")); w.Code != http.StatusForbidden {
			t.Fatalf("request %d: status %d, want 403", i, w.Code)
		}
	}
	const msg = `level=INFO msg="token authenticated but not for this pod"`
	if n := strings.Count(e.logs.String(), msg); n != 1 {
		t.Errorf("50 requests of one forbidden token logged %d times at Info, want 1:\n%s", n, e.logs.String())
	}
	e.clock.Step(refusalLogEvery)
	e.post("wp-1", "result", tok, []byte("x"))
	if n := strings.Count(e.logs.String(), msg); n != 2 {
		t.Errorf("a minute later: logged %d times, want 2", n)
	}
}

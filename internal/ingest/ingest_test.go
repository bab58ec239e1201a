package ingest

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/google/go-cmp/cmp"

	"crucible.dev/crucible/internal/jwt"
	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/store"
)

// rawToken assembles a token from a header and claims, with an arbitrary
// signature segment.
func rawToken(header, claims any, sig string) string {
	enc := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	return enc(header) + "." + enc(claims) + "." + sig
}

func TestCheckOrder(t *testing.T) {
	e := newEnv(t)
	now := e.clock.Now()
	valid := e.addPod("wp-1", "uid-1")
	e.addPod("wp-2", "uid-2")
	other := otherKey
	sigOf := func(tok string) string { return tok[strings.LastIndex(tok, ".")+1:] }
	hdr := map[string]any{"alg": "RS256", "kid": testKID, "typ": "JWT"}
	good := podClaims(now, "wp-1", "uid-1")

	expired := podClaims(now.Add(-2*time.Hour), "wp-1", "uid-1") // exp one hour ago
	justExpired := podClaims(now, "wp-1", "uid-1")
	justExpired.Exp = now.Add(-20 * time.Second).Unix() // within the 30 s leeway
	wrongAud := podClaims(now, "wp-1", "uid-1")
	wrongAud.Aud = []string{"https://kubernetes.default.svc"}
	stringAud := map[string]any{"iss": testIssuer, "aud": testAudience, "exp": good.Exp, "sub": good.Sub}
	noExp := map[string]any{"aud": good.Aud, "sub": good.Sub}
	notYet := map[string]any{"aud": good.Aud, "sub": good.Sub, "exp": good.Exp, "nbf": now.Add(time.Hour).Unix()}
	wrongUser := podClaims(now, "wp-1", "uid-1")
	wrongUser.Sub = "system:serviceaccount:" + testNS + ":default"
	wrongUID := podClaims(now, "wp-1", "uid-other")
	distinct := func(jti string) tokenClaims { // RS256 is deterministic: equal claims make equal tokens
		c := podClaims(now, "wp-1", "uid-1")
		c.Jti = jti
		return c
	}
	otherAudToken := sign(t, spokeKey, testKID, distinct("other-aud"))
	e.spoke.setMode(otherAudToken, modeOtherAud)
	rejected := sign(t, spokeKey, testKID, distinct("rejected"))
	e.spoke.setMode(rejected, modeReject)

	post := func(pod, auth string) *http.Request {
		r := e.request(http.MethodPost, "/api/pods/"+pod+"/artifacts/result", "", []byte("data"))
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		return r
	}
	tests := []struct {
		name string
		req  *http.Request
		want int
	}{
		{"GET", e.request(http.MethodGet, "/api/pods/wp-1/artifacts/result", valid, nil), 405},
		{"PUT", e.request(http.MethodPut, "/api/pods/wp-1/artifacts/result", valid, nil), 405},
		{"short path", e.request(http.MethodPost, "/api/pods/wp-1/artifacts", valid, nil), 404},
		{"long path", e.request(http.MethodPost, "/api/pods/wp-1/artifacts/result/x", valid, nil), 404},
		{"trailing slash", e.request(http.MethodPost, "/api/pods/wp-1/artifacts/result/", valid, nil), 404},
		{"other collection", e.request(http.MethodPost, "/api/pods/wp-1/files/result", valid, nil), 404},
		{"other root", e.request(http.MethodPost, "/apis/pods/wp-1/artifacts/result", valid, nil), 404},
		{"bad pod name", e.request(http.MethodPost, "/api/pods/WP-1/artifacts/result", valid, nil), 400},
		{"no authorization", post("wp-1", ""), 401},
		{"basic scheme", post("wp-1", "Basic "+valid), 401},
		{"empty bearer", post("wp-1", "Bearer "), 401},
		{"bare bearer", post("wp-1", "Bearer"), 401},
		{"garbage", post("wp-1", "Bearer not-a-jwt"), 401},
		{"four parts", post("wp-1", "Bearer "+valid+".x"), 401},
		{"JSON serialization", post("wp-1", `Bearer {"payload":"x.y","signature":"z"}`), 401},
		{"too large", post("wp-1", "Bearer "+rawToken(hdr, good, strings.Repeat("A", jwt.MaxTokenBytes))), 401},
		{"alg none", post("wp-1", "Bearer "+rawToken(map[string]any{"alg": "none"}, good, "")), 401},
		{"alg HS256", post("wp-1", "Bearer "+rawToken(map[string]any{"alg": "HS256", "kid": testKID}, good, sigOf(valid))), 401},
		{"alg RS384", post("wp-1", "Bearer "+rawToken(map[string]any{"alg": "RS384", "kid": testKID}, good, sigOf(valid))), 401},
		{"crit", post("wp-1", "Bearer "+rawToken(map[string]any{"alg": "RS256", "kid": testKID, "crit": []string{"exp"}}, good, sigOf(valid))), 401},
		{"expired", post("wp-1", "Bearer "+sign(t, spokeKey, testKID, expired)), 401},
		{"no exp", post("wp-1", "Bearer "+sign(t, spokeKey, testKID, noExp)), 401},
		{"nbf in an hour", post("wp-1", "Bearer "+sign(t, spokeKey, testKID, notYet)), 401},
		{"wrong audience", post("wp-1", "Bearer "+sign(t, spokeKey, testKID, wrongAud)), 401},
		{"signed by another key", post("wp-1", "Bearer "+sign(t, other, testKID, good)), 401},
		{"unknown kid", post("wp-1", "Bearer "+sign(t, other, "rotated-key", good)), 401},
		{"claims swapped", post("wp-1", "Bearer "+rawToken(hdr, podClaims(now, "wp-2", "uid-2"), sigOf(valid))), 401},
		{"unknown pod", post("wp-9", "Bearer "+valid), 403},
		{"review rejects", post("wp-1", "Bearer "+rejected), 401},
		{"token of another pod", post("wp-2", "Bearer "+valid), 403},
		{"wrong service account", post("wp-1", "Bearer "+sign(t, spokeKey, testKID, wrongUser)), 403},
		{"wrong pod uid", post("wp-1", "Bearer "+sign(t, spokeKey, testKID, wrongUID)), 403},
		{"audience missing from review", post("wp-1", "Bearer "+otherAudToken), 403},
		{"string aud, no pod claims", post("wp-1", "Bearer "+sign(t, spokeKey, testKID, stringAud)), 403},
		{"exp within leeway", post("wp-1", "Bearer "+sign(t, spokeKey, testKID, justExpired)), 201},
		{"lower-case scheme", post("wp-1", "bearer "+valid), 200},
	}
	bodies := map[int]map[string]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := e.serve(tt.req)
			if w.Code != tt.want {
				t.Fatalf("status = %d, want %d (body %s)", w.Code, tt.want, w.Body)
			}
			if tt.want == 405 && w.Header().Get("Allow") != "POST" {
				t.Errorf("Allow = %q, want POST", w.Header().Get("Allow"))
			}
			if tt.want == 401 && w.Header().Get("WWW-Authenticate") != "Bearer" {
				t.Errorf("WWW-Authenticate = %q, want Bearer", w.Header().Get("WWW-Authenticate"))
			}
			for k, v := range map[string]string{"Content-Type": "application/json", "Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"} {
				if got := w.Header().Get(k); got != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
			if bodies[w.Code] == nil {
				bodies[w.Code] = map[string]bool{}
			}
			bodies[w.Code][w.Body.String()] = true
		})
	}
	for _, code := range []int{401, 403} {
		if len(bodies[code]) != 1 {
			t.Errorf("%d answers have %d different bodies, want 1: %v", code, len(bodies[code]), bodies[code])
		}
	}
	// The exact bytes clients have always seen (httperr.CompactJSON).
	for code, want := range map[int]string{401: `{"error":"unauthorized"}` + "\n", 403: `{"error":"forbidden"}` + "\n",
		404: `{"error":"not found"}` + "\n", 405: `{"error":"method not allowed"}` + "\n",
		400: `{"error":"pod and kind must be DNS-1123 labels"}` + "\n"} {
		if !bodies[code][want] || len(bodies[code]) != 1 {
			t.Errorf("%d bodies %v, want only %q", code, bodies[code], want)
		}
	}
	// Everything refused before the TokenReview cost none: the pre-check's
	// refusals, the row's, and a token bound to another pod uid than the
	// row's (another pod's, a wrong uid, none).
	if got := e.spoke.reviews.Load(); got != 5 {
		t.Errorf("TokenReviews = %d, want 5 (one per token that reached the review)", got)
	}
}

func TestUnknownAndKnownPodLookAlike(t *testing.T) {
	e := newEnv(t)
	e.addPod("wp-1", "uid-1")
	tok := e.addPod("wp-2", "uid-2")
	known := e.post("wp-1", "result", tok, []byte("x")) // a known pod, another pod's token
	unknown := e.post("wp-3", "result", tok, []byte("x"))
	if known.Code != 403 || unknown.Code != 403 {
		t.Fatalf("statuses %d, %d, want 403, 403", known.Code, unknown.Code)
	}
	if diff := cmp.Diff(unknown.Body.String(), known.Body.String()); diff != "" {
		t.Errorf("403 bodies differ (-unknown +known):\n%s", diff)
	}
	if diff := cmp.Diff(unknown.Header(), known.Header()); diff != "" {
		t.Errorf("403 headers differ (-unknown +known):\n%s", diff)
	}
}

func TestSpokeUnavailable(t *testing.T) {
	for _, mode := range []reviewMode{modeFail, modeClose, modeHang} {
		t.Run(fmt.Sprint(mode), func(t *testing.T) {
			e := newEnv(t, func(o *Options) { o.reviewTimeout = 300 * time.Millisecond })
			tok := e.addPod("wp-1", "uid-1")
			e.spoke.setMode(tok, mode)
			for i := range 2 { // not cached: the second request reviews again
				w := e.post("wp-1", "result", tok, []byte("data"))
				if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
					t.Fatalf("request %d: status %d, Retry-After %q; want 503 with Retry-After", i, w.Code, w.Header().Get("Retry-After"))
				}
				if want := `{"error":"temporarily unavailable, retry later"}` + "\n"; w.Body.String() != want || w.Header().Get("Retry-After") != "5" {
					t.Errorf("503 answer %q, Retry-After %q; want %q, 5", w.Body, w.Header().Get("Retry-After"), want)
				}
				if got := e.spoke.reviews.Load(); got != int64(i+1) {
					t.Errorf("after request %d: %d reviews, want %d", i, got, i+1)
				}
			}
			if files := e.files("wp-1"); len(files) != 0 {
				t.Errorf("files after 503: %v", files)
			}
			if _, err := e.store.GetArtifact(t.Context(), "wp-1", "result"); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("artifact after 503: err = %v, want ErrNotFound", err)
			}
			e.spoke.setMode(tok, modeVerify) // the spoke recovers
			if w := e.post("wp-1", "result", tok, []byte("data")); w.Code != http.StatusCreated {
				t.Errorf("after recovery: status %d, want 201", w.Code)
			}
		})
	}
}

// A pod can push before its uid is recorded: the controller was killed
// between creating it and writing the row, or the watch has not reported it
// yet. That push is retryable (503, not cached), never 403 — a 403 failed
// the pod for good in the chaos suite's controller-kill scenario. A row that
// is no longer live has no uid coming: 403.
func TestPodUIDNotRecordedYet(t *testing.T) {
	e := newEnv(t)
	for _, p := range []store.WorkPod{
		{ID: "wp-1", Cluster: testClusters[0], Namespace: testNS, Kind: "turn", State: store.StateDispatched},
		{ID: "wp-2", Cluster: testClusters[0], Namespace: testNS, Kind: "turn", State: store.StateFailed},
	} {
		if _, err := e.store.CreateWorkPod(t.Context(), p); err != nil {
			t.Fatal(err)
		}
	}
	tok := e.token("wp-1", "uid-1")
	for i := range 2 { // not cached: the second request reviews again
		w := e.post("wp-1", "result", tok, []byte("data"))
		if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
			t.Fatalf("request %d before the uid is recorded: status %d, Retry-After %q; want 503 with Retry-After", i, w.Code, w.Header().Get("Retry-After"))
		}
		if got := e.spoke.reviews.Load(); got != int64(i+1) {
			t.Errorf("after request %d: %d reviews, want %d", i, got, i+1)
		}
	}
	if files := e.files("wp-1"); len(files) != 0 {
		t.Errorf("files after 503: %v", files)
	}
	if _, err := e.store.TransitionWorkPod(t.Context(), "wp-1", store.Transition{
		From: []store.State{store.StateDispatched}, To: store.StateRunning, PodUID: "uid-1"}); err != nil {
		t.Fatal(err)
	}
	if w := e.post("wp-1", "result", tok, []byte("data")); w.Code != http.StatusCreated {
		t.Errorf("after the uid is recorded: status %d, want 201 (body %s)", w.Code, w.Body)
	}
	// Another pod's uid for a recorded row stays 403, and so does a row
	// that ended without one.
	if w := e.post("wp-1", "other", e.token("wp-1", "uid-9"), []byte("data")); w.Code != http.StatusForbidden {
		t.Errorf("a recorded row, another uid: status %d, want 403", w.Code)
	}
	if w := e.post("wp-2", "result", e.token("wp-2", "uid-2"), []byte("data")); w.Code != http.StatusForbidden {
		t.Errorf("a failed row without a uid: status %d, want 403", w.Code)
	}
}

func TestKeysUnavailable(t *testing.T) {
	e := newEnv(t)
	tok := e.addPod("wp-1", "uid-1")
	e.spoke.jwksFail.Store(true)
	w := e.post("wp-1", "result", tok, []byte("data"))
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Fatalf("no keys: status %d, Retry-After %q; want 503 with Retry-After", w.Code, w.Header().Get("Retry-After"))
	}
	// Within JWKSMinRefresh nothing is refetched; after it the keys load.
	e.spoke.jwksFail.Store(false)
	if w := e.post("wp-1", "result", tok, []byte("data")); w.Code != http.StatusServiceUnavailable {
		t.Errorf("within the refresh interval: status %d, want 503", w.Code)
	}
	e.clock.Step(jwt.DefaultMinRefresh)
	if w := e.post("wp-1", "result", tok, []byte("data")); w.Code != http.StatusCreated {
		t.Errorf("after the refresh interval: status %d, want 201", w.Code)
	}
	// Once loaded, the last good keys survive a failing spoke: a token of
	// a known kid is decided with them, one of an unknown kid (it may be a
	// rotated key the failing fetch would have brought) cannot be.
	e.spoke.jwksFail.Store(true)
	e.clock.Step(jwt.DefaultMinRefresh)
	forged := sign(t, otherKey, testKID, podClaims(e.clock.Now(), "wp-1", "uid-1"))
	if w := e.post("wp-1", "result", forged, []byte("data")); w.Code != http.StatusUnauthorized {
		t.Errorf("forged token of a known kid with failing JWKS: status %d, want 401", w.Code)
	}
	rotated := sign(t, otherKey, "unknown-kid", podClaims(e.clock.Now(), "wp-1", "uid-1"))
	if w := e.post("wp-1", "result", rotated, []byte("data")); w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Errorf("unknown kid with failing JWKS: status %d, Retry-After %q; want 503 with Retry-After", w.Code, w.Header().Get("Retry-After"))
	}
	if w := e.post("wp-1", "result", tok, []byte("data")); w.Code != http.StatusOK {
		t.Errorf("valid token with failing JWKS: status %d, want 200", w.Code)
	}
}

func TestForgedFloodCostsNoReview(t *testing.T) {
	e := newEnv(t)
	valid := e.addPod("wp-1", "uid-1")
	header, _, _ := strings.Cut(valid, ".")
	sig := valid[strings.LastIndex(valid, ".")+1:]
	other := otherKey
	otherKid := sign(t, other, "kid-0", podClaims(e.clock.Now(), "wp-1", "uid-1"))
	otherHeader, _, _ := strings.Cut(otherKid, ".")
	for i := range 10000 {
		c := podClaims(e.clock.Now(), "wp-1", "uid-1")
		c.Jti = fmt.Sprint(i) // a distinct token each time, with a signature over other claims
		b, _ := json.Marshal(c)
		h := header
		if i%2 == 1 {
			h = otherHeader // and half of them with a kid the spoke does not have
		}
		tok := h + "." + base64.RawURLEncoding.EncodeToString(b) + "." + sig
		if w := e.post("wp-1", "result", tok, []byte("x")); w.Code != http.StatusUnauthorized {
			t.Fatalf("forged token %d: status %d, want 401", i, w.Code)
		}
	}
	if got := e.spoke.reviews.Load(); got != 0 {
		t.Errorf("TokenReviews = %d, want 0", got)
	}
	if got := e.spoke.jwksFetches.Load(); got != 1 {
		t.Errorf("JWKS fetches = %d, want 1 (unknown kids are refetched at most once per JWKSMinRefresh)", got)
	}
}

func TestRejectedTokenFlood(t *testing.T) {
	e := newEnv(t)
	e.addPod("wp-1", "uid-1")
	tok := e.token("wp-1", "uid-1")
	e.spoke.setMode(tok, modeReject)
	for round := 1; round <= 2; round++ {
		for i := range 10000 {
			if w := e.post("wp-1", "result", tok, []byte("x")); w.Code != http.StatusUnauthorized {
				t.Fatalf("round %d request %d: status %d, want 401", round, i, w.Code)
			}
		}
		if got := e.spoke.reviews.Load(); got != int64(round) {
			t.Errorf("after round %d: %d TokenReviews, want %d (one per NegativeTTL)", round, got, round)
		}
		e.clock.Step(profile.DefaultIngestNegativeTTL)
	}
}

func TestValidUploadsReviewOncePerToken(t *testing.T) {
	e := newEnv(t)
	const pods, perPod = 100, 100
	tokens := make([]string, pods)
	for i := range pods {
		tokens[i] = e.addPod(fmt.Sprintf("wp-%d", i), fmt.Sprintf("uid-%d", i))
	}
	codes := make(chan int, pods*perPod)
	work := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range work {
				pod := i % pods
				codes <- e.post(fmt.Sprintf("wp-%d", pod), "result", tokens[pod], []byte("same bytes")).Code
			}
		})
	}
	for i := range pods * perPod {
		work <- i
	}
	close(work)
	wg.Wait()
	close(codes)
	got := map[int]int{}
	for c := range codes {
		got[c]++
	}
	if diff := cmp.Diff(map[int]int{201: pods, 200: pods * (perPod - 1)}, got); diff != "" {
		t.Errorf("statuses (-want +got):\n%s", diff)
	}
	if n := e.spoke.reviews.Load(); n > pods {
		t.Errorf("TokenReviews = %d, want at most %d", n, pods)
	}
}

func TestConcurrentFirstRequestsCoalesce(t *testing.T) {
	e := newEnv(t)
	tok := e.addPod("wp-1", "uid-1")
	gate := make(chan struct{})
	e.spoke.gate = gate
	release := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(release) // before the spoke closes, even when the test fails
	const n = 20
	codes := make(chan int, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { codes <- e.post("wp-1", "result", tok, []byte("data")).Code })
	}
	deadline := time.Now().Add(10 * time.Second)
	for e.spoke.reviews.Load() < 1 || e.h.flights.waiting.Load() < n-1 {
		if time.Now().After(deadline) {
			t.Fatalf("reviews %d, waiting %d", e.spoke.reviews.Load(), e.h.flights.waiting.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	release()
	wg.Wait()
	close(codes)
	got := map[int]int{}
	for c := range codes {
		got[c]++
	}
	if diff := cmp.Diff(map[int]int{201: 1, 200: n - 1}, got); diff != "" {
		t.Errorf("statuses (-want +got):\n%s", diff)
	}
	if got := e.spoke.reviews.Load(); got != 1 {
		t.Errorf("TokenReviews = %d, want 1", got)
	}
}

func TestRateLimit(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.RatePerSource, o.RateBurst = 0.5, 2 })
	for i, want := range []int{401, 401, 429} {
		w := e.post("wp-1", "result", "", nil)
		if w.Code != want {
			t.Fatalf("request %d: status %d, want %d", i, w.Code, want)
		}
		if want == 429 && w.Header().Get("Retry-After") != "2" {
			t.Errorf("Retry-After = %q, want 2", w.Header().Get("Retry-After"))
		}
	}
	e.clock.Step(2 * time.Second)
	if w := e.post("wp-1", "result", "", nil); w.Code != 401 {
		t.Errorf("after refill: status %d, want 401", w.Code)
	}
}

func TestForwardedFor(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.RatePerSource, o.RateBurst = 0.001, 1
		o.TrustedProxies = []string{"10.0.0.0/8"}
	})
	send := func(peer, xff string) int {
		r := e.request(http.MethodPost, "/api/pods/wp-1/artifacts/result", "", nil)
		r.RemoteAddr = peer
		if xff != "" {
			r.Header.Set("X-Forwarded-For", xff)
		}
		return e.serve(r).Code
	}
	tests := []struct {
		name, peer, xff string
		want            int
	}{
		{"untrusted peer", "192.0.2.1:1000", "198.51.100.1", 401},
		{"untrusted peer, forged other client", "192.0.2.1:1001", "198.51.100.2", 429},
		{"trusted proxy, client 1", "10.0.0.1:1000", "198.51.100.1", 401},
		{"trusted proxy, client 2", "10.0.0.1:1001", "198.51.100.2", 401},
		{"trusted proxy, client 1 again", "10.0.0.2:1000", "198.51.100.1", 429},
		{"client-written hops are ignored", "10.0.0.1:1002", "203.0.113.7, 10.0.0.9, 198.51.100.2", 429},
		{"trusted proxy without header", "10.0.0.3:1000", "", 401},
		{"IPv6 untrusted peer", "[2001:db8::1]:1000", "198.51.100.3", 401},
		{"IPv6 untrusted peer again", "[2001:db8::1]:1001", "198.51.100.4", 429},
	}
	for _, tt := range tests {
		if got := send(tt.peer, tt.xff); got != tt.want {
			t.Errorf("%s: status %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestBodyLimit(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.MaxBodyBytes = 1024 })
	tok := e.addPod("wp-1", "uid-1")
	for _, chunked := range []bool{false, true} {
		r := e.request(http.MethodPost, "/api/pods/wp-1/artifacts/result", tok, make([]byte, 1025))
		if chunked {
			r.ContentLength = -1
		}
		if w := e.serve(r); w.Code != http.StatusRequestEntityTooLarge {
			t.Errorf("chunked=%v: status %d, want 413", chunked, w.Code)
		}
		if files := e.files("wp-1"); len(files) != 0 {
			t.Errorf("chunked=%v: files left behind: %v", chunked, files)
		}
	}
	if _, err := e.store.GetArtifact(t.Context(), "wp-1", "result"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("artifact recorded after 413: err = %v", err)
	}
	if w := e.post("wp-1", "result", tok, make([]byte, 1024)); w.Code != http.StatusCreated {
		t.Errorf("exactly the limit: status %d, want 201", w.Code)
	}
}

func TestUploadIdempotent(t *testing.T) {
	e := newEnv(t)
	tok := e.addPod("wp-1", "uid-1")
	first := []byte(`{"verdict":"pass"}`)
	sum := sha256.Sum256(first)
	want := uploaded{Pod: "wp-1", Kind: "result", Size: int64(len(first)), SHA256: hex.EncodeToString(sum[:])}
	for i, code := range []int{201, 200} {
		w := e.post("wp-1", "result", tok, first)
		if w.Code != code {
			t.Fatalf("upload %d: status %d, want %d", i, w.Code, code)
		}
		var got uploaded
		if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("upload %d body (-want +got):\n%s", i, diff)
		}
	}
	if w := e.post("wp-1", "result", tok, []byte("other bytes")); w.Code != http.StatusConflict {
		t.Errorf("different bytes: status %d, want 409", w.Code)
	}
	content, err := os.ReadFile(filepath.Join(e.dir.Root, "wp-1", "result."+want.SHA256))
	if err != nil {
		t.Fatal(err)
	}
	if string(content) != string(first) {
		t.Errorf("stored %q, want the first upload", content)
	}
	if diff := cmp.Diff([]string{"result." + want.SHA256}, e.files("wp-1")); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
	a, err := e.store.GetArtifact(t.Context(), "wp-1", "result")
	if err != nil {
		t.Fatal(err)
	}
	if a.Size != want.Size || a.SHA256 != want.SHA256 {
		t.Errorf("recorded %+v, want size %d sha256 %s", a, want.Size, want.SHA256)
	}
}

func TestHostileNames(t *testing.T) {
	e := newEnv(t)
	tok := e.addPod("wp-1", "uid-1")
	paths := []string{
		"/api/pods/../artifacts/result",
		"/api/pods/wp-1/artifacts/..",
		"/api/pods/%2E%2E/artifacts/result",
		"/api/pods/wp-1%2Fx/artifacts/result",
		"/api/pods/wp-1%2fx/artifacts/result",
		"/api/pods/wp-1/artifacts/a%2F..%2F..%2Fetc",
		"/api/pods/wp-1/artifacts/%2Fetc",
		"/api/pods/WP-1/artifacts/result",
		"/api/pods/wp-1/artifacts/Result",
		"/api/pods/wp%001/artifacts/result",
		"/api/pods/wp-1/artifacts/result%0A",
		"/api/pods/wp-1/artifacts/res%09ult",
		"/api/pods//artifacts/result",
		"/api/pods/wp-1/artifacts/",
		"/api/pods/wp-1/artifacts/a.b",
		"/api/pods/wp-1/artifacts/" + strings.Repeat("a", 64),
	}
	for _, p := range paths {
		if w := e.serve(e.request(http.MethodPost, p, tok, []byte("x"))); w.Code != http.StatusBadRequest {
			t.Errorf("%s: status %d, want 400", p, w.Code)
		}
	}
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions} {
		w := e.serve(e.request(m, "/api/pods/wp-1/artifacts/result", tok, nil))
		if w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != http.MethodPost {
			t.Errorf("%s: status %d, Allow %q; want 405, POST", m, w.Code, w.Header().Get("Allow"))
		}
	}
	if e.spoke.reviews.Load() != 0 {
		t.Errorf("hostile names reached the spoke: %d reviews", e.spoke.reviews.Load())
	}
	entries, _ := os.ReadDir(e.dir.Root)
	if len(entries) != 0 {
		t.Errorf("artifacts dir not empty: %v", entries)
	}
}

func TestTokenNeverLogged(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.reviewTimeout = 200 * time.Millisecond })
	valid := e.addPod("wp-1", "uid-1")
	e.addPod("wp-2", "uid-2")
	rejected := sign(t, spokeKey, testKID, podClaims(e.clock.Now().Add(time.Second), "wp-1", "uid-1"))
	e.spoke.setMode(rejected, modeReject)
	failing := sign(t, spokeKey, testKID, podClaims(e.clock.Now().Add(2*time.Second), "wp-1", "uid-1"))
	e.spoke.setMode(failing, modeFail)
	forged := sign(t, otherKey, testKID, podClaims(e.clock.Now(), "wp-1", "uid-1"))
	tokens := []string{valid, rejected, failing, forged}
	for _, tok := range tokens {
		e.post("wp-1", "result", tok, []byte("x"))
		e.post("wp-2", "result", tok, []byte("x"))
		e.post("wp-9", "result", tok, []byte("x"))
	}
	logs := e.logs.String()
	if !strings.Contains(logs, "token=") || !strings.Contains(logs, "level=WARN") {
		t.Fatalf("logs lack the expected entries:\n%s", logs)
	}
	for _, tok := range tokens {
		parts := strings.Split(tok, ".")
		for _, part := range parts[1:] { // the claims and the signature; the header is shared by all
			if strings.Contains(logs, part) {
				t.Errorf("a token part appears in the logs:\n%s", logs)
			}
		}
	}
}

// The seed of FuzzPrecheck: what a precheck must refuse.
func precheckSeeds(t testing.TB, e *env) []string {
	now := e.clock.Now()
	valid := e.token("wp-1", "uid-1")
	sig := valid[strings.LastIndex(valid, ".")+1:]
	good := podClaims(now, "wp-1", "uid-1")
	return []string{
		valid,
		sign(t, otherKey, testKID, good),
		rawToken(map[string]any{"alg": "none"}, good, ""),
		rawToken(map[string]any{"alg": "HS256", "kid": testKID}, good, sig),
		rawToken(map[string]any{"alg": "RS256", "kid": testKID, "jwk": map[string]any{"kty": "oct"}}, good, sig),
		rawToken(map[string]any{"alg": "RS256", "kid": testKID}, map[string]any{"exp": 1e300, "aud": testAudience}, sig),
		rawToken(map[string]any{"alg": "RS256"}, map[string]any{"exp": "soon", "aud": []any{1}}, sig),
		"", ".", "..", "a.b.c", "{}", "e30.e30.", valid + "=",
	}
}

func FuzzPrecheck(f *testing.F) {
	e := newEnv(f)
	e.addPod("wp-1", "uid-1")
	for _, s := range precheckSeeds(f, e) {
		f.Add(s)
	}
	pub := &spokeKey.PublicKey
	f.Fuzz(func(t *testing.T, token string) {
		_, err := e.h.precheck(t.Context(), token)
		if err != nil {
			var rej *rejectError
			if !errors.As(err, &rej) {
				t.Fatalf("precheck: %v, want a rejection", err)
			}
			return
		}
		jws, perr := jose.ParseSignedCompact(token, []jose.SignatureAlgorithm{jose.RS256})
		if perr != nil {
			t.Fatalf("precheck accepted an unparseable token: %v", perr)
		}
		if _, verr := jws.Verify(pub); verr != nil {
			t.Fatalf("precheck accepted a token the spoke key did not sign")
		}
	})
}

func FuzzParsePath(f *testing.F) {
	for _, s := range []string{"wp-1", "..", "%2E%2E", "a%2Fb", "A", "a%00", "", "%zz", "x/y"} {
		f.Add(s, "result")
	}
	f.Fuzz(func(t *testing.T, pod, kind string) {
		r, err := http.NewRequest(http.MethodPost, "http://h/api/pods/"+pod+"/artifacts/"+kind, nil)
		if err != nil {
			return
		}
		p, k, _, valid := parsePath(r.URL)
		if !valid {
			return
		}
		for _, s := range []string{p, k} {
			if s == "" || len(s) > 63 || strings.ContainsAny(s, "/\\.\x00") || strings.ToLower(s) != s || strings.TrimFunc(s, func(r rune) bool {
				return r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-'
			}) != "" {
				t.Errorf("parsePath accepted %q", s)
			}
		}
	})
}

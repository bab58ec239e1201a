package mirror

import (
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"crucible.dev/crucible/internal/metrics"
	"crucible.dev/crucible/internal/profile"
)

func TestConcurrentMissesShareOneFetch(t *testing.T) {
	const n = 50
	hub := newFakeHub(t)
	release := hub.hold()
	defer release()
	m := newTestMirror(t, hub, newFakeClock(), nil)

	var wg sync.WaitGroup
	statuses := make(chan int, 2*n)
	for _, path := range []string{discoveryPath, jwksPath} {
		for range n {
			wg.Go(func() { statuses <- do(t, m, http.MethodGet, path).status })
		}
	}
	waitFor(t, "all requests to wait on the fetch", func() bool {
		return m.discovery.waiters() == n && m.jwks.waiters() == n
	})
	release()
	wg.Wait()
	close(statuses)

	for status := range statuses {
		if status != http.StatusOK {
			t.Errorf("status = %d, want 200", status)
		}
	}
	got := map[string]int{discoveryPath: hub.count(discoveryPath), jwksPath: hub.count(jwksPath)}
	if diff := cmp.Diff(map[string]int{discoveryPath: 1, jwksPath: 1}, got); diff != "" {
		t.Errorf("hub requests per path (-want +got):\n%s", diff)
	}
}

func TestStaleThenUnavailableThenFresh(t *testing.T) {
	const unavailable = `{"error":"%s temporarily unavailable"}` + "\n"
	steps := []struct {
		name         string
		advance      time.Duration
		hub          answer
		wantStatus   int
		wantCache    string
		wantRetry    string
		wantHubCalls int
	}{
		{"first request fetches", 0, up, 200, "public, max-age=30", "", 1},
		{"cached", 10 * time.Second, up, 200, "public, max-age=20", "", 1},
		{"last fresh half second", 19500 * time.Millisecond, down, 200, "public, max-age=0", "", 1},
		{"expired, hub down: stale", time.Second, down, 200, "no-cache", "", 2},                   // t=30.5
		{"within backoff: stale, hub not asked", 4 * time.Second, down, 200, "no-cache", "", 2},   // 34.5
		{"after backoff: hub asked again", time.Second, down, 200, "no-cache", "", 3},             // 35.5
		{"at TTL+MaxStale: still stale", 114500 * time.Millisecond, down, 200, "no-cache", "", 4}, // 150
		{"past TTL+MaxStale: 503", time.Second, down, 503, "no-store", "4", 4},                    // 151
		{"hub still down after backoff", 5 * time.Second, down, 503, "no-store", "5", 5},          // 156
		{"hub back, within backoff", time.Second, up, 503, "no-store", "4", 5},                    // 157
		{"hub back after backoff: fresh", 4 * time.Second, up, 200, "public, max-age=30", "", 6},  // 161
	}
	for _, d := range []document{discoveryDocument(mirrorJWKS), jwksDocument()} {
		t.Run(d.name, func(t *testing.T) {
			hub := newFakeHub(t)
			clock := newFakeClock()
			m := newTestMirror(t, hub, clock, func(o *Options) {
				o.TTL = 30 * time.Second
				o.MaxStale = 2 * time.Minute
			})
			fetchesBefore, responsesBefore := fetchCounts(d.name), responseCounts(d.name)
			var good string
			for _, step := range steps {
				clock.Step(step.advance)
				hub.set(d.path, step.hub)

				got := do(t, m, http.MethodGet, d.path)

				if good == "" {
					good = got.body
				}
				wantBody := good
				if step.wantStatus != http.StatusOK {
					wantBody = strings.Replace(unavailable, "%s", d.name, 1)
				}
				want := stepResult{step.wantStatus, step.wantCache, step.wantRetry, wantBody, step.wantHubCalls}
				gotStep := stepResult{got.status, got.header.Get("Cache-Control"), got.header.Get("Retry-After"), got.body, hub.count(d.path)}
				if diff := cmp.Diff(want, gotStep); diff != "" {
					t.Fatalf("step %q (-want +got):\n%s", step.name, diff)
				}
			}
			wantFetches := map[string]float64{resultOK: 2, resultError: 4, resultInvalid: 0}
			if diff := cmp.Diff(wantFetches, delta(fetchesBefore, fetchCounts(d.name))); diff != "" {
				t.Errorf("upstream fetches metric (-want +got):\n%s", diff)
			}
			wantResponses := map[string]float64{"fresh": 4, "stale": 4, "unavailable": 3}
			if diff := cmp.Diff(wantResponses, delta(responsesBefore, responseCounts(d.name))); diff != "" {
				t.Errorf("responses metric (-want +got):\n%s", diff)
			}
		})
	}
}

type stepResult struct {
	Status       int
	CacheControl string
	RetryAfter   string
	Body         string
	HubCalls     int
}

func TestInvalidAnswersNeverReplaceGoodOnes(t *testing.T) {
	const secret = "hub-internal-detail"
	tooBig := `{"issuer":"https://kubernetes.default.svc","jwks_uri":"https://x/openid/v1/jwks","pad":"` +
		strings.Repeat("a", maxDocumentSize) + `"}`
	tests := []struct {
		name       string
		path       string
		bad        answer
		wantResult string
	}{
		{"discovery 500", discoveryPath, answer{status: 500, body: secret}, resultInvalid},
		{"discovery 403", discoveryPath, answer{status: 403, body: `{"message":"` + secret + `"}`}, resultInvalid},
		{"discovery HTML", discoveryPath, answer{status: 200, body: "<html>" + secret + "</html>"}, resultInvalid},
		{"discovery too big", discoveryPath, answer{status: 200, body: tooBig}, resultInvalid},
		{"discovery without issuer", discoveryPath, answer{status: 200, body: `{"jwks_uri":"https://x/j"}`}, resultInvalid},
		{"discovery empty issuer", discoveryPath, answer{status: 200, body: `{"issuer":"","jwks_uri":"https://x/j"}`}, resultInvalid},
		{"discovery issuer not a string", discoveryPath, answer{status: 200, body: `{"issuer":1,"jwks_uri":"https://x/j"}`}, resultInvalid},
		{"discovery null issuer", discoveryPath, answer{status: 200, body: `{"issuer":null,"jwks_uri":"https://x/j"}`}, resultInvalid},
		{"discovery without jwks_uri", discoveryPath, answer{status: 200, body: `{"issuer":"https://kubernetes.default.svc"}`}, resultInvalid},
		{"discovery array", discoveryPath, answer{status: 200, body: `[]`}, resultInvalid},
		{"discovery null", discoveryPath, answer{status: 200, body: `null`}, resultInvalid},
		{"discovery trailing garbage", discoveryPath, answer{status: 200, body: hubDiscovery + "x"}, resultInvalid},
		{"discovery cut off", discoveryPath, down, resultError},
		{"jwks 503", jwksPath, answer{status: 503, body: secret}, resultInvalid},
		{"jwks HTML", jwksPath, answer{status: 200, body: "<html>" + secret + "</html>"}, resultInvalid},
		{"jwks without keys", jwksPath, answer{status: 200, body: `{}`}, resultInvalid},
		{"jwks null keys", jwksPath, answer{status: 200, body: `{"keys":null}`}, resultInvalid},
		{"jwks empty keys", jwksPath, answer{status: 200, body: `{"keys":[]}`}, resultInvalid},
		{"jwks keys not an array", jwksPath, answer{status: 200, body: `{"keys":"` + secret + `"}`}, resultInvalid},
		{"jwks key not an object", jwksPath, answer{status: 200, body: `{"keys":[1]}`}, resultInvalid},
		{"jwks null key", jwksPath, answer{status: 200, body: `{"keys":[null]}`}, resultInvalid},
		{"jwks cut off", jwksPath, down, resultError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hub := newFakeHub(t)
			clock := newFakeClock()
			m := newTestMirror(t, hub, clock, nil)
			d := m.route(tt.path).doc
			unavailable := `{"error":"` + d.name + ` temporarily unavailable"}` + "\n"
			before := fetchCounts(d.name)

			hub.set(tt.path, tt.bad)
			if got := do(t, m, http.MethodGet, tt.path); got.status != 503 || got.body != unavailable {
				t.Fatalf("cold cache, bad answer: got %d %q, want 503 %q", got.status, got.body, unavailable)
			}

			clock.Step(retryBackoff)
			hub.set(tt.path, up)
			good := do(t, m, http.MethodGet, tt.path)
			if good.status != 200 {
				t.Fatalf("good answer: got %d %q, want 200", good.status, good.body)
			}

			hub.set(tt.path, tt.bad)
			clock.Step(profile.DefaultMirrorTTL)
			got := do(t, m, http.MethodGet, tt.path)
			want := reply{status: 200, body: good.body}
			if diff := cmp.Diff(want, reply{status: got.status, body: got.body}, cmp.AllowUnexported(reply{})); diff != "" {
				t.Errorf("after a bad answer (-want +got):\n%s", diff)
			}
			if cc := got.header.Get("Cache-Control"); cc != "no-cache" {
				t.Errorf("Cache-Control = %q, want no-cache", cc)
			}

			wantCounts := map[string]float64{resultOK: 1, resultError: 0, resultInvalid: 0}
			wantCounts[tt.wantResult] = 2
			if diff := cmp.Diff(wantCounts, delta(before, fetchCounts(d.name))); diff != "" {
				t.Errorf("upstream fetches metric (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSizeLimit(t *testing.T) {
	// body builds a discovery document of exactly size bytes.
	body := func(size int) string {
		head := `{"issuer":"https://kubernetes.default.svc","jwks_uri":"https://x/j","pad":"`
		return head + strings.Repeat("a", size-len(head)-2) + `"}`
	}
	tests := []struct {
		size       int
		wantStatus int
	}{
		{maxDocumentSize, http.StatusOK},
		{maxDocumentSize + 1, http.StatusServiceUnavailable},
	}
	for _, tt := range tests {
		hub := newFakeHub(t)
		hub.set(discoveryPath, answer{status: 200, body: body(tt.size)})
		m := newTestMirror(t, hub, newFakeClock(), nil)
		if got := do(t, m, http.MethodGet, discoveryPath); got.status != tt.wantStatus {
			t.Errorf("document of %d bytes: status %d, want %d", tt.size, got.status, tt.wantStatus)
		}
	}
}

func TestStatusAndCheck(t *testing.T) {
	hub := newFakeHub(t)
	clock := newFakeClock()
	t0 := clock.Now()
	m := newTestMirror(t, hub, clock, func(o *Options) { o.MaxStale = time.Minute })

	type view struct {
		Discovery, JWKS DocumentStatus
		DiscoveryErr    string
		CheckErr        string
	}
	look := func() view {
		err := m.Check(t.Context())
		st := m.Status()
		v := view{Discovery: st.Discovery, JWKS: st.JWKS, CheckErr: errString(err)}
		v.DiscoveryErr, v.Discovery.LastError = errString(v.Discovery.LastError), nil
		return v
	}

	if diff := cmp.Diff(Status{}, m.Status()); diff != "" {
		t.Errorf("status before any fetch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(view{Discovery: DocumentStatus{LastSuccess: t0}, JWKS: DocumentStatus{LastSuccess: t0}}, look()); diff != "" {
		t.Errorf("after the first check (-want +got):\n%s", diff)
	}

	hub.set(discoveryPath, answer{status: http.StatusForbidden, body: "forbidden"})
	clock.Step(profile.DefaultMirrorTTL)
	t1 := clock.Now()
	want := view{
		Discovery:    DocumentStatus{LastSuccess: t0, LastFailure: t1},
		JWKS:         DocumentStatus{LastSuccess: t1},
		DiscoveryErr: "invalid upstream answer: upstream answered status 403",
	}
	if diff := cmp.Diff(want, look()); diff != "" {
		t.Errorf("discovery failing, still stale-servable (-want +got):\n%s", diff)
	}
	if err := m.Status().Discovery.LastError; !errors.Is(err, errInvalid) || !errors.As(err, new(statusError)) {
		t.Errorf("LastError = %v, want errInvalid with a statusError", err)
	}

	clock.Step(time.Minute + time.Second)
	err := m.Check(t.Context())
	if !errors.Is(err, ErrUnavailable) || err.Error() != "discovery: no servable document" {
		t.Errorf("Check past MaxStale = %v, want discovery: ErrUnavailable", err)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestDocumentAgeMetric(t *testing.T) {
	hub := newFakeHub(t)
	clock := newFakeClock()
	m := newTestMirror(t, hub, clock, nil)
	if n := testutil.CollectAndCount(metrics.MirrorDocumentAge); n != 0 {
		t.Fatalf("age series before any fetch = %d, want 0", n)
	}
	do(t, m, http.MethodGet, discoveryPath)
	clock.Step(12 * time.Second)
	// Only discovery has been fetched, so it is the one series.
	if got := testutil.ToFloat64(metrics.MirrorDocumentAge); got != 12 {
		t.Errorf("crucible_mirror_document_age_seconds = %v, want 12", got)
	}
}

// A rotation that revoked the old token costs no fetch: the hub's 401 makes
// the controller's client re-read its token file, and the same fetch asks
// once more with the new token, so the answer is fresh rather than stale
// for the backoff (or 503 past max_stale). A token the hub refuses twice
// fails the fetch after exactly two requests, never a loop.
func TestRotatedTokenIsUsedInTheSameFetch(t *testing.T) {
	hub := newFakeHub(t)
	clock := newFakeClock()
	m := newTestMirror(t, hub, clock, func(o *Options) {
		o.TTL = 30 * time.Second
		o.MaxStale = time.Minute
	})
	steps := []struct {
		name      string
		change    func()
		wantCache string
		wantHits  int
		wantFetch map[string]float64
	}{
		{"first fetch", func() {}, "public, max-age=30", 1,
			map[string]float64{resultOK: 1, resultError: 0, resultInvalid: 0}},
		{"token rotated, the old one revoked", func() { hub.rotate(t, "hub-sa-token-2") }, "public, max-age=30", 2,
			map[string]float64{resultOK: 1, resultError: 0, resultInvalid: 0}},
		{"the hub refuses the file's token too", func() {
			hub.mu.Lock()
			hub.token = "a-token-nobody-has"
			hub.mu.Unlock()
		}, "no-cache", 2, map[string]float64{resultOK: 0, resultError: 0, resultInvalid: 1}},
	}
	for _, step := range steps {
		step.change()
		hits, fetches := hub.count(discoveryPath), fetchCounts("discovery")
		got := do(t, m, http.MethodGet, discoveryPath)
		if got.status != http.StatusOK || got.header.Get("Cache-Control") != step.wantCache {
			t.Errorf("%s: %d Cache-Control %q, want 200 %q", step.name, got.status, got.header.Get("Cache-Control"), step.wantCache)
		}
		if n := hub.count(discoveryPath) - hits; n != step.wantHits {
			t.Errorf("%s: %d hub requests, want %d", step.name, n, step.wantHits)
		}
		if diff := cmp.Diff(step.wantFetch, delta(fetches, fetchCounts("discovery"))); diff != "" {
			t.Errorf("%s: fetches counted (-want +got):\n%s", step.name, diff)
		}
		clock.Step(31 * time.Second) // past the TTL: the next request fetches
	}
}

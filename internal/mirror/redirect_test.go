package mirror

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// A redirect from the hub is an upstream failure, never followed: the
// controller's token rides on every request its client sends, so following
// would hand it to whatever the Location names. The elsewhere server shares
// httptest's certificate, so the hub client would trust it: only the
// mirror's refusal keeps it from being contacted.
func TestRedirectIsNotFollowed(t *testing.T) {
	for _, code := range []int{http.StatusFound, http.StatusMovedPermanently, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		t.Run(http.StatusText(code), func(t *testing.T) {
			var contacted, sawToken atomic.Int32
			elsewhere := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				contacted.Add(1)
				if r.Header.Get("Authorization") != "" {
					sawToken.Add(1)
				}
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(hubJWKS))
			}))
			t.Cleanup(elsewhere.Close)

			hub := newFakeHub(t)
			clock := newFakeClock()
			m := newTestMirror(t, hub, clock, func(o *Options) {
				o.TTL = 30 * time.Second
				o.MaxStale = time.Minute
			})
			redirect := answer{status: code, body: "{}", location: elsewhere.URL + jwksPath}

			steps := []struct {
				name       string
				advance    time.Duration
				hub        answer
				wantStatus int
				wantCache  string
			}{
				{"redirect before any good copy: 503", 0, redirect, 503, "no-store"},
				{"hub answers after backoff: fresh", 10 * time.Second, up, 200, "public, max-age=30"},
				{"expired, hub redirects: stale", 31 * time.Second, redirect, 200, "no-cache"},
				{"past TTL+MaxStale, still redirecting: 503", time.Minute, redirect, 503, "no-store"},
			}
			for _, step := range steps {
				clock.Step(step.advance)
				hub.set(jwksPath, step.hub)
				got := do(t, m, http.MethodGet, jwksPath)
				if diff := cmp.Diff([]any{step.wantStatus, step.wantCache}, []any{got.status, got.header.Get("Cache-Control")}); diff != "" {
					t.Fatalf("step %q (-want +got):\n%s", step.name, diff)
				}
			}
			if hub.count(jwksPath) != 4 {
				t.Errorf("hub asked %d times, want 4", hub.count(jwksPath))
			}
			if n, tok := contacted.Load(), sawToken.Load(); n != 0 || tok != 0 {
				t.Errorf("redirect target contacted %d times (%d with a token), want never", n, tok)
			}
		})
	}
}

package e2e

import (
	"context"
	"net/http"
	"os"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"crucible.dev/crucible/internal/devstack"
)

// The trust bootstrap across a controller restart (issue 40) on a stack of
// its own (make acceptance): with the hub API stopped, the controller is
// restarted; its mirror serves the discovery documents the store kept
// from before (their max_stale counted from that fetch, not from the
// restart), so wharf's webhook, restarted now too without the keys it kept
// itself, fetches the hub's keys from it and accepts a fresh controller
// token. Past ttl + max_stale of the
// kept fetch the mirror answers 503.
func TestMirrorServesKeptDocumentsAfterARestart(t *testing.T) {
	t.Parallel()
	const ttl, maxStale = time.Second, 40 * time.Second
	opts := stackOptions()
	opts.MirrorTTL, opts.MirrorMaxStale = ttl, maxStale
	s := ownStack(t, opts)
	client := http2Client(t, s.CAFile)
	mirror := func(path string) int {
		resp, err := get(t.Context(), client, s.Federation.ControllerExternalURL+path)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, path := range []string{"/.well-known/openid-configuration", "/openid/v1/jwks"} {
		if code := mirror(path); code != http.StatusOK {
			t.Fatalf("mirror %s before the outage: %d", path, code)
		}
	}
	lastFetch := time.Now() // the hub answers until now: the kept fetch is at most this old

	if err := s.StopAPIServer(s.Hub); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.StartAPIServer(context.Background(), s.Hub) })
	if err := s.RestartProcess(t.Context(), "crucible-controller", s.ControllerReady); err != nil {
		t.Fatalf("the controller restarted with the hub API down is not ready: %v", err)
	}
	// Without the keys it kept itself: the webhook must fetch them from
	// the restarted mirror.
	if err := os.RemoveAll(s.Federation.WebhookStateDirs["wharf"]); err != nil {
		t.Fatal(err)
	}
	if err := s.RestartProcess(t.Context(), "crucible-webhook-wharf", s.WebhookReady("wharf")); err != nil {
		t.Fatal(err)
	}
	mint := func() string {
		return forged{claims: hubClaims(devstack.HubSubject, "wharf")}.signRS256(t, s.Hub.ServiceAccountKey.Key)
	}
	waitWhoami(t, s, s.Spoke("wharf"), controllerUser, mint)
	if time.Since(lastFetch) >= ttl+maxStale {
		t.Fatalf("the check took past max_stale (%s): raise it", time.Since(lastFetch))
	}

	err := wait.PollUntilContextTimeout(t.Context(), time.Second, ttl+maxStale+30*time.Second, true, func(context.Context) (bool, error) {
		return mirror("/openid/v1/jwks") == http.StatusServiceUnavailable, nil
	})
	if err != nil {
		t.Errorf("the mirror still serves the kept JWKS %s after the hub went down (ttl %s, max_stale %s)", time.Since(lastFetch), ttl, maxStale)
	}
}

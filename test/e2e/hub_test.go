package e2e

// These tests take the hub's API server away or restart it with a new key,
// so each runs on a stack of its own: the shared stack's other tests never
// see a hub in the middle of an outage, whatever order the tests run in.

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"crucible.dev/crucible/internal/devstack"
)

func TestHubKeyRotationNeedsNoRestart(t *testing.T) {
	t.Parallel() // a stack of its own: see doc.go
	s := ownStack(t, stackOptions())
	wharf := s.Spoke("wharf")
	before := hubToken(t, s, devstack.HubServiceAccount, "wharf")
	// The webhook knows the hub's keys before the rotation, as a running
	// spoke's does.
	waitWhoami(t, s, wharf, controllerUser, func() string { return before })
	pids := s.Processes()
	if err := s.RotateServiceAccountKey(t.Context(), s.Hub); err != nil {
		t.Fatal(err)
	}
	after := hubToken(t, s, devstack.HubServiceAccount, "wharf")
	if header(t, before) == header(t, after) {
		t.Fatal("rotation did not change the signing key id")
	}
	waitWhoami(t, s, wharf, controllerUser, func() string { return hubToken(t, s, devstack.HubServiceAccount, "wharf") })
	if got, err := whoami(t.Context(), s, wharf, before); err != nil || got != controllerUser {
		t.Errorf("token signed before the rotation: whoami = %q, %v", got, err)
	}
	for _, name := range []string{"crucible-webhook-wharf", "crucible-controller"} {
		if s.Processes()[name] != pids[name] {
			t.Errorf("%s was restarted", name)
		}
	}
}

func header(t *testing.T, token string) string {
	t.Helper()
	return strings.SplitN(token, ".", 2)[0]
}

// With the hub API down the mirror serves its last good documents (no-cache)
// for MaxStale, the webhook keeps accepting tokens signed with keys it knows,
// and after the bound the mirror answers 503 with Retry-After.
func TestHubOutageBoundedStaleness(t *testing.T) {
	t.Parallel() // a stack of its own: see doc.go
	opts := stackOptions()
	s := ownStack(t, opts)
	wharf := s.Spoke("wharf")
	client := caClientFor(t, s)
	discovery := s.Federation.ControllerExternalURL + "/.well-known/openid-configuration"
	// The webhook has fetched the hub's keys through the mirror before the
	// outage, as a running spoke's has.
	waitWhoami(t, s, wharf, controllerUser, func() string { return hubToken(t, s, devstack.HubServiceAccount, "wharf") })
	// The staleness bound runs from the mirror's last good fetch, which no
	// test can see; a fresh answer to a request sent at asked was fetched
	// after asked − TTL, so the bound (fetch + TTL + MaxStale) ends after
	// asked + MaxStale. Measured from the hub's stop instead, the bound
	// depends on how long the hub took to die and how starved it was before.
	var asked time.Time
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		at := time.Now()
		r, err := get(ctx, client, discovery)
		if err != nil {
			return false, nil
		}
		r.Body.Close()
		asked = at
		return r.StatusCode == http.StatusOK && strings.HasPrefix(r.Header.Get("Cache-Control"), "public, max-age="), nil
	})
	if err != nil {
		t.Fatalf("mirror before the outage: never a fresh document: %v", err)
	}
	if err := s.StopAPIServer(s.Hub); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.StartAPIServer(context.Background(), s.Hub); err != nil {
			t.Errorf("restart hub: %v", err)
		}
	})

	// Past the TTL (1s), within MaxStale (8s): stale but served.
	time.Sleep(1500 * time.Millisecond)
	resp, err := get(t.Context(), client, discovery)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Cache-Control") != "no-cache" {
		t.Errorf("stale discovery: %d Cache-Control %q, want 200 no-cache", resp.StatusCode, resp.Header.Get("Cache-Control"))
	}
	// The hub cannot mint tokens now; one signed with its key stands in.
	tok := forged{claims: hubClaims(devstack.HubSubject, "wharf")}.signRS256(t, s.Hub.ServiceAccountKey.Key)
	if got, err := whoami(t.Context(), s, wharf, tok); err != nil || got != controllerUser {
		t.Errorf("during the outage: whoami = %q, %v; want %q", got, err, controllerUser)
	}

	var last *http.Response
	var answered time.Time // when the first 503 arrived
	err = wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		r, err := get(ctx, client, discovery)
		if err != nil {
			return false, nil
		}
		answered = time.Now()
		r.Body.Close()
		last = r
		return r.StatusCode == http.StatusServiceUnavailable, nil
	})
	if err != nil {
		t.Fatalf("mirror never answered 503 (last %v)", last)
	}
	if since := answered.Sub(asked); since <= opts.MirrorMaxStale {
		t.Errorf("503 answered %s after the request of the last fresh document, within the %s staleness bound", since.Round(time.Millisecond), opts.MirrorMaxStale)
	}
	if last.Header.Get("Retry-After") == "" || last.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("503 headers: Retry-After %q Cache-Control %q", last.Header.Get("Retry-After"), last.Header.Get("Cache-Control"))
	}
	// Keys the webhook already has still validate.
	tok = forged{claims: hubClaims(devstack.HubSubject, "wharf")}.signRS256(t, s.Hub.ServiceAccountKey.Key)
	if got, err := whoami(t.Context(), s, wharf, tok); err != nil || got != controllerUser {
		t.Errorf("after the bound: whoami = %q, %v; want %q", got, err, controllerUser)
	}

	if err := s.StartAPIServer(t.Context(), s.Hub); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		r, err := get(ctx, client, discovery)
		if err != nil {
			return false, nil
		}
		r.Body.Close()
		return r.StatusCode == http.StatusOK && strings.HasPrefix(r.Header.Get("Cache-Control"), "public, max-age="), nil
	})
	if err != nil {
		t.Errorf("mirror did not recover after the hub came back: %v", err)
	}
}

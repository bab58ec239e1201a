package fleet_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/oauth2"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
	"crucible.dev/crucible/internal/fleet"
	"crucible.dev/crucible/internal/jwt"
	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/render"
	"crucible.dev/crucible/internal/retry"
)

// hubTap sits in the hub client's transport: it counts the TokenRequests
// that reach it and, while failWith is set, answers them itself with that
// status, as a hub in trouble would.
type hubTap struct {
	mu       sync.Mutex
	requests int
	failWith int
}

func (h *hubTap) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/token") {
			return rt.RoundTrip(r)
		}
		h.mu.Lock()
		h.requests++
		status := h.failWith
		h.mu.Unlock()
		if status == 0 {
			return rt.RoundTrip(r)
		}
		body := `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"injected","reason":"ServiceUnavailable","code":503}`
		return &http.Response{StatusCode: status, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(body)), Request: r}, nil
	})
}

func (h *hubTap) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.requests
}

func (h *hubTap) fail(status int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failWith = status
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// hubAccount is the controller's hub identity on s as the controller has
// it: a token of its service account in a file, and a client of the hub
// that authenticates with it (through tap).
func hubAccount(t *testing.T, s *devstack.Stack, tap *hubTap) *fleet.HubAccount {
	t.Helper()
	token, err := s.Hub.TokenRequest(t.Context(), devstack.HubNamespace, devstack.HubServiceAccount, []string{devstack.Issuer}, 3600, nil)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "hub.token")
	if err := os.WriteFile(file, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	kube, err := kubernetes.NewForConfig(&rest.Config{Host: s.Hub.Server, BearerToken: token,
		TLSClientConfig: rest.TLSClientConfig{CAFile: s.CAFile}, WrapTransport: tap.wrap})
	if err != nil {
		t.Fatal(err)
	}
	acct, err := fleet.NewHubAccount(kube, file)
	if err != nil {
		t.Fatal(err)
	}
	if acct.Namespace != devstack.HubNamespace || acct.Name != devstack.HubServiceAccount {
		t.Fatalf("hub account %s/%s, want %s/%s (the token's sub)", acct.Namespace, acct.Name, devstack.HubNamespace, devstack.HubServiceAccount)
	}
	return acct
}

// requestEntry is a cluster entry with token_source = "request" as Parse
// defaults it.
func requestEntry(name, server, caFile string) profile.ClusterEntry {
	return profile.ClusterEntry{Name: name, Server: server, CAFile: caFile, TokenSource: profile.TokenSourceRequest,
		TokenAudience: name, TokenExpiration: profile.Duration{Duration: 10 * time.Minute}, QPS: 50, Burst: 100}
}

// wantTransient: the spoke request that could not get a token (its
// *url.Error, as client-go returns it) is retried, or fails for good.
func wantTransient(t *testing.T, err error, want bool) {
	t.Helper()
	inRequest := &url.Error{Op: "Post", URL: "https://spoke/api/v1/namespaces/loops/pods", Err: err}
	if got := retry.IsTransient(inRequest); got != want {
		t.Errorf("IsTransient(%v) = %v, want %v", err, got, want)
	}
}

// The spoke tokens of token_source = "request" against a real hub: refused
// without the RBAC of `render hub --token-request` (failing closed, naming
// it, not asked again within the backoff), then granted; renewed at 80 %
// of the life the hub gave, early after a 401, and across a failing hub the
// old token stays in use while it is valid.
func TestRequestedTokens(t *testing.T) {
	s := devstacktest.Start(t, devstack.Options{})
	tap := &hubTap{}
	acct := hubAccount(t, s, tap)
	// Each case has a clock of its own that starts at the hub's time: the
	// hub's expiry times are real ones.
	newClock := func() *clocktesting.FakeClock { return clocktesting.NewFakeClock(time.Now()) }
	wharf := s.Spoke(devstack.DefaultSpokeName)
	entry := requestEntry(wharf.Name, wharf.Server, s.CAFile)

	t.Run("refused without the RBAC", func(t *testing.T) {
		clock := newClock()
		ts := fleet.NewRequestedTokens(entry, acct, clock.Now)
		before := tap.count()
		_, err := ts.Token()
		if !errors.Is(err, fleet.ErrTokenRequest) {
			t.Fatalf("Token() = %v, want ErrTokenRequest", err)
		}
		for _, want := range []string{"cluster wharf", "serviceaccounts/token", "resourceNames [crucible-controller]", "namespace crucible", "--token-request"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
		wantTransient(t, err, false)
		if _, ok := ts.Expiry(); ok {
			t.Error("an expiry without a token")
		}
		// Within the backoff the refusal is answered without the hub.
		if _, err2 := ts.Token(); err2 == nil || err2.Error() != err.Error() {
			t.Errorf("second Token() = %v, want the same refusal", err2)
		}
		if n := tap.count() - before; n != 1 {
			t.Errorf("%d TokenRequests, want 1 (the second within the backoff)", n)
		}
		clock.Step(2 * time.Second)
		if _, err := ts.Token(); !errors.Is(err, fleet.ErrTokenRequest) {
			t.Errorf("after the backoff: %v, want the refusal again", err)
		}
		if n := tap.count() - before; n != 2 {
			t.Errorf("%d TokenRequests, want 2 (asked again after the backoff)", n)
		}
	})

	// A probe of a spoke whose token the hub refuses sends nothing to the
	// spoke: not reachable, credentials not valid, the refusal as its error.
	t.Run("health of a refused spoke", func(t *testing.T) {
		clients, err := fleet.NewClients([]profile.ClusterEntry{entry}, fleet.WithHubAccount(acct))
		if err != nil {
			t.Fatal(err)
		}
		c, _ := clients.Get(wharf.Name)
		h := c.Probe(t.Context())
		if h.Reachable || h.CredentialsValid || h.TokenExpiry != nil || !strings.Contains(h.LastError, "serviceaccounts/token") {
			t.Errorf("health %+v, want unreachable, no token, an error naming serviceaccounts/token", h)
		}
	})

	for _, obj := range render.HubTokenRequestRBAC(devstack.HubNamespace, devstack.HubServiceAccount) {
		applyRBAC(t, s, obj)
	}
	// The hub's authorizer sees the binding within moments.
	waitToken(t, fleet.NewRequestedTokens(entry, acct, time.Now))

	t.Run("renewed at 80 percent of its life", func(t *testing.T) {
		clock := newClock()
		ts := fleet.NewRequestedTokens(entry, acct, clock.Now)
		asked := clock.Now()
		first := mustToken(t, ts)
		exp, ok := ts.Expiry()
		if !ok || !exp.After(asked) {
			t.Fatalf("expiry %v %v after a token asked for at %v", exp, ok, asked)
		}
		renewAt := asked.Add(exp.Sub(asked) * 8 / 10)
		before := tap.count()
		clock.SetTime(renewAt.Add(-time.Second))
		if got := mustToken(t, ts); got.AccessToken != first.AccessToken || tap.count() != before {
			t.Fatalf("a second before 80 %%: a new token or a TokenRequest (%d)", tap.count()-before)
		}
		clock.SetTime(renewAt.Add(time.Second))
		// Past 80 % the old token is still handed out while the new one is
		// asked for in the background.
		if got := mustToken(t, ts); got.AccessToken != first.AccessToken {
			t.Error("past 80 %: the caller waited for the renewal although its token was valid")
		}
		second := waitNewToken(t, ts, first)
		if n := tap.count() - before; n != 1 {
			t.Errorf("%d TokenRequests to renew, want 1", n)
		}
		// Health reports the token in use: the renewed one's exp claim.
		parsed, err := jwt.Parse(second.AccessToken)
		if err != nil {
			t.Fatal(err)
		}
		if exp2, _ := ts.Expiry(); !exp2.Equal(parsed.Claims.Expiry) {
			t.Errorf("Expiry() = %v, the token in use expires %v", exp2, parsed.Claims.Expiry)
		}
	})

	t.Run("renewed early after a 401", func(t *testing.T) {
		clock := newClock()
		ts := fleet.NewRequestedTokens(entry, acct, clock.Now)
		first := mustToken(t, ts)
		before := tap.count()
		ts.ResetTokenOlderThan(clock.Now().Add(time.Nanosecond))
		// Spacing: at most one TokenRequest a second, meanwhile the old one.
		if got := mustToken(t, ts); got.AccessToken != first.AccessToken || tap.count() != before {
			t.Errorf("right after the 401: new token %v, %d TokenRequests; want the old one and none", got.AccessToken != first.AccessToken, tap.count()-before)
		}
		clock.Step(2 * time.Second)
		if got := mustToken(t, ts); got.AccessToken == first.AccessToken {
			t.Error("after the 401 and the spacing: the rejected token again")
		}
		if n := tap.count() - before; n != 1 {
			t.Errorf("%d TokenRequests after the 401, want 1", n)
		}
	})

	t.Run("a failing hub leaves the valid token in use", func(t *testing.T) {
		clock := newClock()
		ts := fleet.NewRequestedTokens(entry, acct, clock.Now)
		asked := clock.Now()
		first := mustToken(t, ts)
		exp, _ := ts.Expiry()
		tap.fail(http.StatusServiceUnavailable)
		before := tap.count()
		clock.SetTime(asked.Add(exp.Sub(asked) * 9 / 10))
		if got := mustToken(t, ts); got.AccessToken != first.AccessToken {
			t.Fatal("past 80 % with a failing hub: not the old token")
		}
		waitRequests(t, tap, before+1) // the background renewal failed
		if got := mustToken(t, ts); got.AccessToken != first.AccessToken {
			t.Error("after the failed renewal: not the old, still valid token")
		}
		// About to expire there is nothing to send: an error that asks to
		// be retried, not a refusal. (Not past the expiry: the hub's next
		// token would look expired on this clock.)
		clock.SetTime(exp.Add(-5 * time.Second))
		_, err := ts.Token()
		if !errors.Is(err, fleet.ErrTokenRequest) || !strings.Contains(err.Error(), "asking again") {
			t.Fatalf("expiring, hub failing: %v, want a transient ErrTokenRequest", err)
		}
		wantTransient(t, err, true)
		if n := tap.count() - before; n != 2 {
			t.Errorf("%d TokenRequests to the failing hub, want 2", n)
		}
		tap.fail(0)
		clock.Step(3 * time.Second) // past the second backoff (2s)
		if got := mustToken(t, ts); got.AccessToken == first.AccessToken {
			t.Error("the hub is back: still the expiring token")
		}
	})

	t.Run("bound to the controller's pod", func(t *testing.T) { testBoundToPod(t, s, acct, entry) })
}

// applyRBAC creates a Role or RoleBinding on the hub as its admin.
func applyRBAC(t *testing.T, s *devstack.Stack, obj runtime.Object) {
	t.Helper()
	rbac := s.Hub.Client.RbacV1()
	var err error
	switch o := obj.(type) {
	case *rbacv1.Role:
		_, err = rbac.Roles(o.Namespace).Create(t.Context(), o, metav1.CreateOptions{})
	case *rbacv1.RoleBinding:
		_, err = rbac.RoleBindings(o.Namespace).Create(t.Context(), o, metav1.CreateOptions{})
	default:
		t.Fatalf("applyRBAC: unexpected %T", obj)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func mustToken(t *testing.T, ts fleet.TokenSource) *oauth2.Token {
	t.Helper()
	tok, err := ts.Token()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// waitToken waits until ts gets a token from the hub.
func waitToken(t *testing.T, ts fleet.TokenSource) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		_, last = ts.Token()
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("no token once granted: %v (%v)", last, err)
	}
}

// waitNewToken waits until ts hands out a token other than old (a
// background renewal ended).
func waitNewToken(t *testing.T, ts fleet.TokenSource, old *oauth2.Token) *oauth2.Token {
	t.Helper()
	var tok *oauth2.Token
	err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		tok = mustToken(t, ts)
		return tok.AccessToken != old.AccessToken, nil
	})
	if err != nil {
		t.Fatalf("no renewed token: %v", err)
	}
	return tok
}

// waitRequests waits until tap has seen n TokenRequests.
func waitRequests(t *testing.T, tap *hubTap, n int) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return tap.count() >= n, nil
	})
	if err != nil {
		t.Fatalf("%d TokenRequests, want %d: %v", tap.count(), n, err)
	}
}

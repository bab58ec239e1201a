package webhook

import (
	"crypto/elliptic"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	authv1 "k8s.io/api/authentication/v1"

	"crucible.dev/crucible/internal/jwt/jwttest"
	"crucible.dev/crucible/internal/metrics"
)

var (
	authenticatedHub = authv1.TokenReviewStatus{Authenticated: true, User: hubUser()}
	rejectedStatus   = authv1.TokenReviewStatus{}
)

// withinGrace is the answer for a token whose kid the hub's fresh keys
// lack, during the unknown-kid grace: an error kube-apiserver does not cache.
func withinGrace(kid string) authv1.TokenReviewStatus {
	return authv1.TokenReviewStatus{Error: fmt.Sprintf(
		"crucible authn webhook: keys of provider hub unavailable: signing keys unavailable: key id %q unknown, within its grace", kid)}
}

// TestKeyRotationWithoutRestart: a hub key rotation that reaches the
// webhook after the first token of the new key is never a cached no.
func TestKeyRotationWithoutRestart(t *testing.T) {
	f := newFixture(t, defaultProvider())
	checkStatus(t, f.review(t, v1, hubToken(t, hubClaims())), authenticatedHub)

	rotated := jwttest.Sign(t, testKeys()[2], jose.RS256, "k2", hubClaims(), nil)
	// The mirror still serves the old JWKS: status.error, not a no.
	checkStatus(t, f.review(t, v1, rotated), withinGrace("k2"))
	if got := f.iss.jwksFetches.Load(); got != 1 {
		t.Errorf("JWKS fetched %d times within the interval, want 1", got)
	}

	f.iss.set(func(ti *testIssuer) { ti.published["k2"] = testKeys()[2] })
	f.clock.Step(10 * time.Second)
	checkStatus(t, f.review(t, v1, rotated), authenticatedHub)
	checkStatus(t, f.review(t, v1, hubToken(t, hubClaims())), authenticatedHub) // the old key still published
	if got := f.iss.jwksFetches.Load(); got != 2 {
		t.Errorf("JWKS fetched %d times, want 2", got)
	}
}

// TestUnknownKidGraceThenDefinitive: a kid that never gets published is an
// error for the grace after it is first seen, then a definitive no.
func TestUnknownKidGraceThenDefinitive(t *testing.T) {
	f := newFixture(t, defaultProvider())
	rogue := jwttest.Sign(t, testKeys()[1], jose.RS256, "rogue", hubClaims(), nil)
	checkStatus(t, f.review(t, v1, rogue), withinGrace("rogue"))
	f.clock.Step(DefaultUnknownKeyIDGrace - time.Second)
	checkStatus(t, f.review(t, v1, rogue), withinGrace("rogue"))
	f.clock.Step(time.Second)
	checkStatus(t, f.review(t, v1, rogue), rejectedStatus)
}

func TestUnknownKidGraceDisabled(t *testing.T) {
	p := defaultProvider()
	p.grace = "0s"
	f := newFixture(t, p)
	rogue := jwttest.Sign(t, testKeys()[1], jose.RS256, "rogue", hubClaims(), nil)
	checkStatus(t, f.review(t, v1, rogue), rejectedStatus)
}

func TestUnknownKidFloodFetchesOncePerInterval(t *testing.T) {
	f := newFixture(t, defaultProvider())
	checkStatus(t, f.review(t, v1, hubToken(t, hubClaims())), authenticatedHub)
	fetches := func() float64 {
		return testutil.ToFloat64(metrics.WebhookJWKSFetches.WithLabelValues("hub", "success"))
	}
	before := fetches()

	flood := func() {
		var wg sync.WaitGroup
		statuses := make([]authv1.TokenReviewStatus, 50)
		errs := make([]error, 50)
		for i := range statuses {
			token := jwttest.Sign(t, testKeys()[1], jose.RS256, fmt.Sprintf("random-%d", i), hubClaims(), nil)
			wg.Go(func() { statuses[i], errs[i] = f.tryReview(v1, token) })
		}
		wg.Wait()
		for i := range statuses {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			checkStatus(t, statuses[i], withinGrace(fmt.Sprintf("random-%d", i)))
		}
	}
	flood()
	if got := f.iss.jwksFetches.Load(); got != 1 {
		t.Errorf("JWKS fetched %d times after a flood within the interval, want 1 (the first use)", got)
	}
	f.clock.Step(10 * time.Second)
	flood()
	if got := f.iss.jwksFetches.Load(); got != 2 {
		t.Errorf("JWKS fetched %d times after a flood in the next interval, want 2", got)
	}
	if d := fetches() - before; d != 1 {
		t.Errorf("crucible_webhook_jwks_fetches_total{provider=hub,result=success} rose by %v, want 1", d)
	}
}

func TestKeysKeptWhenFetchFails(t *testing.T) {
	f := newFixture(t, defaultProvider())
	checkStatus(t, f.review(t, v1, hubToken(t, hubClaims())), authenticatedHub)

	f.iss.set(func(ti *testIssuer) { ti.jwksOff = true })
	f.clock.Step(10 * time.Second)
	unknown := jwttest.Sign(t, testKeys()[1], jose.RS256, "k9", hubClaims(), nil)

	// The refresh for k9 fails: no definitive answer for k9 ...
	got := f.review(t, v1, unknown)
	if got.Authenticated || !strings.Contains(got.Error, "jwks: GET") {
		t.Errorf("unknown kid while JWKS is down: %+v, want an error", got)
	}
	// ... and within the interval still none (the last fetch failed) ...
	if got := f.review(t, v1, unknown); got.Error == "" {
		t.Errorf("unknown kid after a failed fetch: %+v, want an error", got)
	}
	// ... while tokens of the kept key still pass.
	checkStatus(t, f.review(t, v1, hubToken(t, hubClaims())), authenticatedHub)
	if fetches := f.iss.jwksFetches.Load(); fetches != 2 {
		t.Errorf("JWKS fetched %d times, want 2", fetches)
	}
	code, ready := getReadiness(t, f.h)
	if code != 200 || !ready.Ready || !strings.Contains(ready.Providers[0].Error, "500 Internal Server Error") {
		t.Errorf("readyz = %d %+v, want ready with the fetch error", code, ready)
	}
}

func TestES384TokenAuthenticates(t *testing.T) {
	f := newFixture(t, defaultProvider())
	key := jwttest.ECKey(elliptic.P384())
	f.iss.set(func(ti *testIssuer) { ti.published["e384"] = key })
	token := jwttest.Sign(t, key, jose.ES384, "e384", hubClaims(), nil)
	checkStatus(t, f.review(t, v1, token), authenticatedHub)
}

func checkStatus(t *testing.T, got, want authv1.TokenReviewStatus) {
	t.Helper()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
}

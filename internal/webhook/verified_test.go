package webhook

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authv1 "k8s.io/api/authentication/v1"
	testingclock "k8s.io/utils/clock/testing"

	"crucible.dev/crucible/internal/lru"
)

func accepted(exp time.Time) outcome {
	return outcome{provider: "hub", result: resultAuthenticated, reason: "ok", user: hubUser(), exp: exp, status: []byte(`{"authenticated":true}`)}
}

func key(s string) string { return lru.TokenKey(s) }

// TestVerifiedCacheExpiry: an acceptance is reused until the token's exp or
// the cache's max age, whichever comes first, and never at or after it.
func TestVerifiedCacheExpiry(t *testing.T) {
	clock := testingclock.NewFakeClock(time.Unix(1_000_000, 0))
	c := newVerifiedCache(8, time.Minute, clock.Now)
	start := clock.Now()
	c.put(key("short"), accepted(start.Add(30*time.Second)))
	c.put(key("long"), accepted(start.Add(time.Hour)))
	c.put(key("expired"), accepted(start))

	clock.Step(29 * time.Second)
	for _, k := range []string{"short", "long"} {
		if _, ok := c.get(key(k)); !ok {
			t.Errorf("%s: missed before its end", k)
		}
	}
	if _, ok := c.get(key("expired")); ok {
		t.Error("a token at its exp was cached")
	}
	clock.Step(time.Second) // exp of "short"
	if _, ok := c.get(key("short")); ok {
		t.Error("short: served at its exp")
	}
	if _, ok := c.get(key("long")); !ok {
		t.Error("long: missed within the max age")
	}
	clock.Step(30 * time.Second) // the max age of "long"
	if _, ok := c.get(key("long")); ok {
		t.Error("long: served past the cache's max age")
	}
	if got := c.len(); got != 0 {
		t.Errorf("entries after every one ended = %d, want 0", got)
	}
}

// TestVerifiedCacheBounded: the cache never holds more than its size,
// evicting the least recently used first (so a token the API servers keep
// asking about survives a flood of others), and a token stored again after
// its entry ended is kept.
func TestVerifiedCacheBounded(t *testing.T) {
	clock := testingclock.NewFakeClock(time.Unix(1_000_000, 0))
	c := newVerifiedCache(4, time.Minute, clock.Now)
	exp := clock.Now().Add(time.Hour)
	for i := range 10 {
		c.put(key(fmt.Sprint(i)), accepted(exp))
		if got := c.len(); got > 4 {
			t.Fatalf("after %d puts the cache holds %d, want at most 4", i+1, got)
		}
	}
	for i := range 10 {
		_, ok := c.get(key(fmt.Sprint(i)))
		if want := i >= 6; ok != want {
			t.Errorf("token %d cached = %v, want %v (the last 4 kept)", i, ok, want)
		}
	}

	c = newVerifiedCache(3, time.Minute, clock.Now)
	c.put(key("hot"), accepted(exp))
	for i := range 5 {
		if _, ok := c.get(key("hot")); !ok {
			t.Fatalf("hot token evicted after %d others", i)
		}
		c.put(key(fmt.Sprint("flood-", i)), accepted(exp))
	}
	if _, ok := c.get(key("flood-0")); ok {
		t.Error("the least recently used token was kept over the one asked about")
	}

	c = newVerifiedCache(3, time.Minute, clock.Now)
	c.put(key("a"), accepted(clock.Now().Add(time.Second)))
	clock.Step(time.Second)
	if _, ok := c.get(key("a")); ok { // expired: dropped
		t.Fatal("expired entry served")
	}
	c.put(key("a"), accepted(exp))
	c.put(key("b"), accepted(exp))
	c.put(key("c"), accepted(exp))
	if _, ok := c.get(key("a")); !ok {
		t.Error("a token stored again after its entry ended was evicted")
	}
}

// TestVerifiedCacheOnlyAcceptances: rejections, errors and acceptances
// without an exp are never stored.
func TestVerifiedCacheOnlyAcceptances(t *testing.T) {
	clock := testingclock.NewFakeClock(time.Unix(1_000_000, 0))
	c := newVerifiedCache(8, time.Minute, clock.Now)
	exp := clock.Now().Add(time.Hour)
	c.put(key("rejected"), outcome{provider: "hub", result: resultRejected, reason: "subject not in allowedSubjects", exp: exp})
	c.put(key("error"), outcome{provider: "hub", result: resultError, reason: "keys unavailable", exp: exp})
	c.put(key("no exp"), accepted(time.Time{}))
	for _, k := range []string{"rejected", "error", "no exp"} {
		if _, ok := c.get(key(k)); ok {
			t.Errorf("%s: cached", k)
		}
	}
	if got := c.len(); got != 0 {
		t.Errorf("entries = %d, want 0", got)
	}
}

// TestReviewCache: the same token asked twice is verified once; a token
// that was rejected stays rejected (never cached as accepted); a reload
// drops every cached acceptance, so a subject removed from the allowlist is
// refused at once.
func TestReviewCache(t *testing.T) {
	f, file, r := reloadFixture(t)
	token := hubToken(t, hubClaims())
	want := authv1.TokenReviewStatus{Authenticated: true, User: hubUser()}
	for range 3 {
		if diff := cmp.Diff(want, f.review(t, v1, token)); diff != "" {
			t.Fatalf("review (-want +got):\n%s", diff)
		}
	}
	cache := f.srv.current.Load().verified
	if hits, misses := cache.hits.Load(), cache.misses.Load(); hits != 2 || misses != 1 {
		t.Errorf("hits %d misses %d, want 2 and 1 (one signature check for three reviews)", hits, misses)
	}
	if diff := cmp.Diff(want, f.review(t, v1beta1, token)); diff != "" {
		t.Errorf("cached answer in v1beta1 (-want +got):\n%s", diff)
	}

	other := hubToken(t, with(hubClaims(), map[string]any{"sub": "system:serviceaccount:crucible:default"}))
	for range 2 {
		checkStatus(t, f.review(t, v1, other), rejectedStatus)
	}
	if got := cache.len(); got != 1 {
		t.Errorf("cache holds %d entries, want 1 (the rejected token is not stored)", got)
	}

	file.write(t, configYAML(f.iss, testProvider{subjects: []string{"system:serviceaccount:crucible:someone-else"}, prefix: "hub:"}))
	r.Check(t.Context())
	checkStatus(t, f.review(t, v1, token), rejectedStatus)
}

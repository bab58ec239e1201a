package jwt

import (
	"errors"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	testingclock "k8s.io/utils/clock/testing"

	"crucible.dev/crucible/internal/jwt/jwttest"
)

// seededFixture is a KeySet seeded with k1 (fetched an hour before the
// clock, expiring two hours after it) over a JWKS server that is down.
func seededFixture(t *testing.T, refreshAfter time.Duration) *fixture {
	t.Helper()
	f := &fixture{srv: newJWKSServer(t, jwttest.PublicJWK(rsaKey(1), "k2", jose.RS256)), clock: testingclock.NewFakeClock(time.Unix(1_800_000_000, 0))}
	f.srv.set(func(s *jwksServer) { s.fail = true })
	seed := &Seed{
		Keys:      []jose.JSONWebKey{jwttest.PublicJWK(rsaKey(0), "k1", jose.RS256)},
		FetchedAt: f.clock.Now().Add(-time.Hour),
		Expires:   f.clock.Now().Add(2 * time.Hour),
	}
	f.ks = NewKeySet(KeySetOptions{Fetch: f.srv.fetch, MinRefresh: 10 * time.Second, Now: f.clock.Now, Seed: seed, RefreshAfter: refreshAfter})
	return f
}

// TestSeedUsedWhileFetchFails: seeded keys verify while the issuer is down,
// say so in Held, and stop at their expiry.
func TestSeedUsedWhileFetchFails(t *testing.T) {
	f := seededFixture(t, 0)
	if err := f.ks.Load(t.Context()); err != nil {
		t.Fatalf("Load with a seed and the issuer down: %v", err)
	}
	if got := f.srv.fetches.Load(); got != 1 {
		t.Errorf("fetches after Load = %d, want 1 (a seed is not a fetch)", got)
	}
	if _, err := f.ks.Verify(t.Context(), token(t, 0, "k1")); err != nil {
		t.Fatalf("seeded key: %v", err)
	}
	if _, err := f.ks.Verify(t.Context(), token(t, 1, "k1")); !errors.Is(err, ErrBadSignature) {
		t.Errorf("forged k1: %v, want ErrBadSignature", err)
	}
	held, ok := f.ks.Held()
	want := Held{FetchedAt: f.clock.Now().Add(-time.Hour), Seeded: true}
	if !ok || held != want {
		t.Errorf("Held = %+v, %v; want %+v", held, ok, want)
	}
	ready, lastErr := f.ks.Status()
	if !ready || lastErr == nil {
		t.Errorf("Status = %v, %v; want ready with the fetch error", ready, lastErr)
	}

	f.clock.Step(2 * time.Hour)
	if _, err := f.ks.Verify(t.Context(), token(t, 0, "k1")); !errors.Is(err, ErrUnavailable) {
		t.Errorf("expired seed: %v, want ErrUnavailable", err)
	}
	if ready, _ := f.ks.Status(); ready {
		t.Error("Status ready with only an expired seed")
	}
	if _, ok := f.ks.Held(); ok {
		t.Error("Held reports an expired seed")
	}
}

// TestFreshKeysReplaceSeed: once the issuer answers, its keys replace the
// seed, through Load and through a verification with the seed.
func TestFreshKeysReplaceSeed(t *testing.T) {
	for _, viaVerify := range []bool{false, true} {
		f := seededFixture(t, 0)
		if err := f.ks.Load(t.Context()); err != nil {
			t.Fatal(err)
		}
		f.srv.set(func(s *jwksServer) { s.fail = false })
		f.clock.Step(time.Minute)
		if viaVerify {
			if _, err := f.ks.Verify(t.Context(), token(t, 0, "k1")); err != nil {
				t.Fatalf("seeded key: %v", err)
			}
			waitFetches(t, f, 2)
		} else if err := f.ks.Load(t.Context()); err != nil {
			t.Fatal(err)
		}
		held, ok := f.ks.Held()
		if want := (Held{FetchedAt: f.clock.Now()}); !ok || held != want {
			t.Errorf("viaVerify=%v: Held = %+v, %v; want %+v", viaVerify, held, ok, want)
		}
		if _, err := f.ks.Verify(t.Context(), token(t, 1, "k2")); err != nil {
			t.Errorf("viaVerify=%v: fresh key: %v", viaVerify, err)
		}
		if _, err := f.ks.Verify(t.Context(), token(t, 0, "k1")); !errors.Is(err, ErrUnknownKey) {
			t.Errorf("viaVerify=%v: seeded key after fresh keys: %v, want ErrUnknownKey", viaVerify, err)
		}
	}
}

// TestRefreshAfter: a verification with keys older than RefreshAfter
// starts a fetch; younger keys start none.
func TestRefreshAfter(t *testing.T) {
	f := newFixture(t, 0, jwttest.PublicJWK(rsaKey(0), "k1", jose.RS256))
	f.ks = NewKeySet(KeySetOptions{Fetch: f.srv.fetch, MinRefresh: 10 * time.Second, Now: f.clock.Now, RefreshAfter: time.Hour})
	for range 2 {
		if _, err := f.ks.Verify(t.Context(), token(t, 0, "k1")); err != nil {
			t.Fatal(err)
		}
	}
	waitFetches(t, f, 1)
	f.clock.Step(time.Hour)
	if _, err := f.ks.Verify(t.Context(), token(t, 0, "k1")); err != nil {
		t.Fatal(err)
	}
	waitFetches(t, f, 2)
	if held, _ := f.ks.Held(); !held.FetchedAt.Equal(f.clock.Now()) {
		t.Errorf("Held.FetchedAt = %v, want the refresh's time %v", held.FetchedAt, f.clock.Now())
	}
}

// waitFetches waits for a background fetch to have stored its keys: the
// server counted n fetches and the set holds fresh keys fetched now.
func waitFetches(t *testing.T, f *fixture, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		held, ok := f.ks.Held()
		if f.srv.fetches.Load() == n && ok && !held.Seeded && held.FetchedAt.Equal(f.clock.Now()) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("fetches = %d, want %d with fresh keys", f.srv.fetches.Load(), n)
}

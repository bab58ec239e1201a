package jwt

import (
	"context"
	"crypto/elliptic"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"crucible.dev/crucible/internal/jwt/jwttest"
)

func TestVerifyAlgorithms(t *testing.T) {
	p256, p384, p521 := jwttest.ECKey(elliptic.P256()), jwttest.ECKey(elliptic.P384()), jwttest.ECKey(elliptic.P521())
	f := newFixture(t, 0,
		jwttest.PublicJWK(rsaKey(0), "r1", jose.RS256),
		jwttest.PublicJWK(p256, "e256", jose.ES256),
		jose.JSONWebKey{Key: p384.Public(), KeyID: "e384"}, // no alg: any matching the key type
		jwttest.PublicJWK(p521, "e521", jose.ES512),
	)
	pubJSON, _ := json.Marshal(jose.JSONWebKey{Key: rsaKey(0).Public()})
	c := claims()
	tests := []struct {
		name  string
		token string
		want  error // nil: verifies
	}{
		{"RS256", token(t, 0, "r1"), nil},
		{"ES256", jwttest.Sign(t, p256, jose.ES256, "e256", c, nil), nil},
		{"ES384", jwttest.Sign(t, p384, jose.ES384, "e384", c, nil), nil},
		{"ES512", jwttest.Sign(t, p521, jose.ES512, "e521", c, nil), nil},
		{"no kid tries every key", jwttest.Sign(t, p384, jose.ES384, "", c, nil), nil},
		{"ES384 under the P-521 kid", jwttest.Sign(t, p384, jose.ES384, "e521", c, nil), ErrBadSignature},
		{"another RSA key under r1", token(t, 1, "r1"), ErrBadSignature},
		{"no kid, no key verifies", token(t, 1, ""), ErrBadSignature},
		{"unknown kid", token(t, 0, "r9"), ErrUnknownKey},
		{"alg none", jwttest.Raw(map[string]any{"alg": "none", "kid": "r1"}, c, ""), ErrMalformed},
		{"HS256 keyed with the public key", jwttest.Sign(t, pubJSON, jose.HS256, "r1", c, nil), ErrMalformed},
		{"PS256", jwttest.Sign(t, rsaKey(0), jose.PS256, "r1", c, nil), ErrMalformed},
		{"RS384", jwttest.Sign(t, rsaKey(0), jose.RS384, "r1", c, nil), ErrMalformed},
		{"crit header", jwttest.Sign(t, rsaKey(0), jose.RS256, "r1", c, map[string]any{"crit": []string{"exp"}}), ErrMalformed},
		{"JSON serialization", jwttest.JWS(t, rsaKey(0), jose.RS256, "r1", c, nil).FullSerialize(), ErrMalformed},
		{"oversized", token(t, 0, "r1") + string(make([]byte, MaxTokenBytes)), ErrMalformed},
		{"garbage", "a.b.c", ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			payload, err := f.ks.Verify(t.Context(), tt.token)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				var got map[string]any
				if err := json.Unmarshal(payload, &got); err != nil || got["sub"] != c["sub"] {
					t.Errorf("payload = %s, want the token's claims", payload)
				}
				return
			}
			if !errors.Is(err, tt.want) || payload != nil {
				t.Errorf("Verify = %q, %v; want no payload and %v", payload, err, tt.want)
			}
		})
	}
	if got := f.srv.fetches.Load(); got != 1 {
		t.Errorf("fetches = %d, want 1 (the first use; unknown kids within MinRefresh fetch nothing)", got)
	}
}

// TestSingleFlight: concurrent verifies of a kid the set lacks share one
// fetch, and every one of them gets the fetch's answer (a caller refused by
// the rate limit would get ErrUnknownKey instead).
func TestSingleFlight(t *testing.T) {
	f := newFixture(t, 0, jwttest.PublicJWK(rsaKey(0), "k1", jose.RS256))
	gate := make(chan struct{})
	f.srv.set(func(s *jwksServer) { s.gate = gate })
	release := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(release)
	const n = 50
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { _, errs[i] = f.ks.Verify(t.Context(), token(t, 0, "k1")) })
	}
	deadline := time.Now().Add(10 * time.Second)
	for f.ks.waiting.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d callers waiting, want %d", f.ks.waiting.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
	release()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("caller %d: %v", i, err)
		}
	}
	if got := f.srv.fetches.Load(); got != 1 {
		t.Errorf("fetches = %d, want 1", got)
	}
}

func TestUnknownKidRateLimit(t *testing.T) {
	f := newFixture(t, 0, jwttest.PublicJWK(rsaKey(0), "k1", jose.RS256))
	flood := func() {
		for i := range 200 {
			if _, err := f.ks.Verify(t.Context(), token(t, 1, fmt.Sprintf("random-%d", i))); !errors.Is(err, ErrUnknownKey) {
				t.Fatalf("random kid %d: %v, want ErrUnknownKey", i, err)
			}
		}
	}
	flood()
	if got := f.srv.fetches.Load(); got != 1 {
		t.Errorf("fetches after a flood within MinRefresh = %d, want 1", got)
	}
	f.clock.Step(9 * time.Second)
	flood()
	if got := f.srv.fetches.Load(); got != 1 {
		t.Errorf("fetches 9s later = %d, want 1", got)
	}
	f.clock.Step(time.Second)
	flood()
	if got := f.srv.fetches.Load(); got != 2 {
		t.Errorf("fetches after MinRefresh = %d, want 2", got)
	}
	// A known kid never fetches.
	f.clock.Step(time.Minute)
	if _, err := f.ks.Verify(t.Context(), token(t, 0, "k1")); err != nil {
		t.Fatal(err)
	}
	if got := f.srv.fetches.Load(); got != 2 {
		t.Errorf("fetches after a known kid = %d, want 2", got)
	}
}

func TestLastGoodKeysKept(t *testing.T) {
	f := newFixture(t, 0, jwttest.PublicJWK(rsaKey(0), "k1", jose.RS256))
	if _, err := f.ks.Verify(t.Context(), token(t, 0, "k1")); err != nil {
		t.Fatal(err)
	}
	f.srv.set(func(s *jwksServer) { s.fail = true })
	f.clock.Step(time.Minute)
	// The refresh for k2 fails: no definitive answer for k2, before and
	// after the rate limit refuses another fetch ...
	for i := range 2 {
		if _, err := f.ks.Verify(t.Context(), token(t, 1, "k2")); !errors.Is(err, ErrUnavailable) {
			t.Errorf("unknown kid, JWKS down, attempt %d: %v, want ErrUnavailable", i, err)
		}
	}
	if _, err := f.ks.VerifyLoaded(token(t, 1, "k2")); !errors.Is(err, ErrUnavailable) {
		t.Errorf("VerifyLoaded of an unknown kid after a failed fetch: %v, want ErrUnavailable", err)
	}
	// ... while tokens of the kept key pass and forged ones fail definitively.
	if _, err := f.ks.Verify(t.Context(), token(t, 0, "k1")); err != nil {
		t.Errorf("kept key: %v", err)
	}
	if _, err := f.ks.Verify(t.Context(), token(t, 1, "k1")); !errors.Is(err, ErrBadSignature) {
		t.Errorf("forged k1: %v, want ErrBadSignature", err)
	}
	ready, lastErr := f.ks.Status()
	if !ready || lastErr == nil {
		t.Errorf("Status = %v, %v; want ready with the fetch error", ready, lastErr)
	}
	if got := f.srv.fetches.Load(); got != 2 {
		t.Errorf("fetches = %d, want 2", got)
	}
}

func TestUnavailableVersusUnknown(t *testing.T) {
	f := newFixture(t, 0, jwttest.PublicJWK(rsaKey(0), "k1", jose.RS256))
	f.srv.set(func(s *jwksServer) { s.fail = true })
	if _, err := f.ks.Verify(t.Context(), token(t, 0, "k1")); !errors.Is(err, ErrUnavailable) {
		t.Errorf("no keys yet, JWKS down: %v, want ErrUnavailable", err)
	}
	if err := f.ks.Load(t.Context()); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Load with JWKS down: %v, want ErrUnavailable", err)
	}
	if ready, _ := f.ks.Status(); ready {
		t.Error("ready without keys")
	}
	f.srv.set(func(s *jwksServer) { s.fail = false })
	if _, err := f.ks.Verify(t.Context(), token(t, 0, "k1")); !errors.Is(err, ErrUnavailable) {
		t.Errorf("JWKS back but within MinRefresh: %v, want ErrUnavailable", err)
	}
	f.clock.Step(10 * time.Second)
	if err := f.ks.Load(t.Context()); err != nil {
		t.Errorf("Load: %v", err)
	}
	if _, err := f.ks.Verify(t.Context(), token(t, 0, "k2")); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("fresh keys without k2: %v, want ErrUnknownKey", err)
	}
	empty := newFixture(t, 0)
	if _, err := empty.ks.Verify(t.Context(), token(t, 0, "k1")); !errors.Is(err, ErrUnavailable) {
		t.Errorf("an empty JWKS: %v, want ErrUnavailable", err)
	}
}

// TestUnknownKidGrace: a kid absent from fresh keys is unavailable for the
// grace after it is first seen, then definitively unknown; a key that gets
// published within the grace verifies.
func TestUnknownKidGrace(t *testing.T) {
	f := newFixture(t, 2*time.Minute, jwttest.PublicJWK(rsaKey(0), "k1", jose.RS256))
	rotated := token(t, 1, "k2")
	forged := token(t, 2, "k3")
	for _, step := range []time.Duration{0, time.Minute, 59 * time.Second} {
		f.clock.Step(step)
		for _, tok := range []string{rotated, forged} {
			if _, err := f.ks.Verify(t.Context(), tok); !errors.Is(err, ErrUnavailable) {
				t.Fatalf("%v into the grace: %v, want ErrUnavailable", step, err)
			}
		}
	}
	if got := f.srv.fetches.Load(); got != 3 {
		t.Errorf("fetches within the grace = %d, want 3 (at most one per MinRefresh)", got)
	}
	f.srv.set(func(s *jwksServer) {
		s.published = append(s.published, jwttest.PublicJWK(rsaKey(1), "k2", jose.RS256))
	})
	f.clock.Step(10 * time.Second) // past the grace of k3; k2 is fetched
	if _, err := f.ks.Verify(t.Context(), rotated); err != nil {
		t.Errorf("rotated key after publication: %v", err)
	}
	if _, err := f.ks.Verify(t.Context(), forged); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("after the grace: %v, want ErrUnknownKey", err)
	}
	if n := f.ks.firstSeen.Len(); n != 1 {
		t.Errorf("tracked kids = %d, want 1 (k3; k2 was published)", n)
	}
}

func TestUnknownKidTrackingBounded(t *testing.T) {
	f := newFixture(t, time.Minute, jwttest.PublicJWK(rsaKey(0), "k1", jose.RS256))
	tok := token(t, 0, "k1")
	header := map[string]any{"alg": "RS256", "kid": ""}
	sig := tok[len(tok)-10:]
	for i := range 5000 {
		header["kid"] = fmt.Sprintf("random-%d", i)
		_, _ = f.ks.VerifyLoaded(jwttest.Raw(header, claims(), sig))
	}
	if _, err := f.ks.Verify(t.Context(), tok); err != nil { // loads keys
		t.Fatal(err)
	}
	for i := range 5000 {
		header["kid"] = fmt.Sprintf("random-%d", i)
		if _, err := f.ks.VerifyLoaded(jwttest.Raw(header, claims(), sig)); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("random kid %d within the grace: %v", i, err)
		}
	}
	if n := f.ks.firstSeen.Len(); n != DefaultMaxTrackedKids {
		t.Errorf("tracked kids = %d, want the bound %d", n, DefaultMaxTrackedKids)
	}
}

// TestFetchOutlivesCaller: a caller that stops waiting gets ErrUnavailable,
// and the fetch it started still completes for the next one.
func TestFetchOutlivesCaller(t *testing.T) {
	f := newFixture(t, 0, jwttest.PublicJWK(rsaKey(0), "k1", jose.RS256))
	gate := make(chan struct{})
	f.srv.set(func(s *jwksServer) { s.gate = gate })
	release := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(release)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := f.ks.Verify(ctx, token(t, 0, "k1"))
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for f.srv.fetches.Load() < 1 {
		if time.Now().After(deadline) {
			t.Fatal("no fetch started")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled caller: %v, want ErrUnavailable and context.Canceled", err)
	}
	release()
	for {
		if ready, _ := f.ks.Status(); ready {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the detached fetch never stored keys")
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := f.ks.Verify(t.Context(), token(t, 0, "k1")); err != nil {
		t.Errorf("after the detached fetch: %v", err)
	}
	if got := f.srv.fetches.Load(); got != 1 {
		t.Errorf("fetches = %d, want 1", got)
	}
}

package webhook

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/google/go-cmp/cmp"
	authv1 "k8s.io/api/authentication/v1"

	"crucible.dev/crucible/internal/jwt"
)

var (
	authenticatedHub = authv1.TokenReviewStatus{Authenticated: true, User: hubUser()}
	rejectedStatus   = authv1.TokenReviewStatus{}
)

func TestKeyRotationWithoutRestart(t *testing.T) {
	f := newFixture(t, defaultProvider())
	checkStatus(t, f.review(t, v1, hubToken(t, hubClaims())), authenticatedHub)

	f.iss.set(func(ti *testIssuer) { ti.published["k2"] = testKeys()[2] })
	rotated := compact(t, signToken(t, testKeys()[2], jose.RS256, "k2", hubClaims(), nil))

	// Within the refresh interval the key set is fresh: an unknown kid is a no.
	checkStatus(t, f.review(t, v1, rotated), rejectedStatus)
	if got := f.iss.jwksFetches.Load(); got != 1 {
		t.Errorf("JWKS fetched %d times within the interval, want 1", got)
	}

	f.clock.Advance(10 * time.Second)
	checkStatus(t, f.review(t, v1, rotated), authenticatedHub)
	checkStatus(t, f.review(t, v1, hubToken(t, hubClaims())), authenticatedHub) // the old key still published
	if got := f.iss.jwksFetches.Load(); got != 2 {
		t.Errorf("JWKS fetched %d times, want 2", got)
	}
}

func TestUnknownKidFloodFetchesOncePerInterval(t *testing.T) {
	f := newFixture(t, defaultProvider())
	checkStatus(t, f.review(t, v1, hubToken(t, hubClaims())), authenticatedHub)

	flood := func() {
		var wg sync.WaitGroup
		statuses := make([]authv1.TokenReviewStatus, 50)
		errs := make([]error, 50)
		for i := range statuses {
			token := compact(t, signToken(t, testKeys()[1], jose.RS256, fmt.Sprintf("random-%d", i), hubClaims(), nil))
			wg.Go(func() { statuses[i], errs[i] = f.tryReview(v1, token) })
		}
		wg.Wait()
		for i := range statuses {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			checkStatus(t, statuses[i], rejectedStatus)
		}
	}
	flood()
	if got := f.iss.jwksFetches.Load(); got != 1 {
		t.Errorf("JWKS fetched %d times after a flood within the interval, want 1 (the first use)", got)
	}
	f.clock.Advance(10 * time.Second)
	flood()
	if got := f.iss.jwksFetches.Load(); got != 2 {
		t.Errorf("JWKS fetched %d times after a flood in the next interval, want 2", got)
	}
}

func TestKeysKeptWhenFetchFails(t *testing.T) {
	f := newFixture(t, defaultProvider())
	checkStatus(t, f.review(t, v1, hubToken(t, hubClaims())), authenticatedHub)

	f.iss.set(func(ti *testIssuer) { ti.jwksOff = true })
	f.clock.Advance(10 * time.Second)
	unknown := compact(t, signToken(t, testKeys()[1], jose.RS256, "k9", hubClaims(), nil))

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

func checkStatus(t *testing.T, got, want authv1.TokenReviewStatus) {
	t.Helper()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
}

// TestVerifySignature checks the key set on its own, without the shape
// checks in front of it, so each attack is refused twice over.
func TestVerifySignature(t *testing.T) {
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ks := &keySet{}
	ks.keys.Store(&[]jose.JSONWebKey{
		{Key: testKeys()[0].Public(), KeyID: "k1", Algorithm: "RS256", Use: "sig"},
		{Key: ecKey.Public(), KeyID: "e1"},
	})
	pubDER := mustJSON(t, jose.JSONWebKey{Key: testKeys()[0].Public()})
	claims := hubClaims()

	tests := []struct {
		name    string
		token   string
		wantErr string
	}{
		{"RS256 with k1", hubToken(t, claims), ""},
		{"ES256 with e1", compact(t, signToken(t, ecKey, jose.ES256, "e1", claims, nil)), ""},
		{"no kid tries every key", compact(t, signToken(t, testKeys()[0], jose.RS256, "", claims, nil)), ""},
		{"unknown kid", compact(t, signToken(t, testKeys()[0], jose.RS256, "k2", claims, nil)), `no key with id "k2"`},
		{"kid of another key", compact(t, signToken(t, testKeys()[0], jose.RS256, "e1", claims, nil)), `no key with id "e1"`},
		{"alg none", unsigned(t, map[string]any{"alg": "none", "kid": "k1"}, claims), "unexpected signature algorithm"},
		{"HS256 with public key bytes", compact(t, signToken(t, pubDER, jose.HS256, "k1", claims, nil)), "unexpected signature algorithm"},
		{"PS256 with k1", compact(t, signToken(t, testKeys()[0], jose.PS256, "k1", claims, nil)), "unexpected signature algorithm"},
		{"crit header", compact(t, signToken(t, testKeys()[0], jose.RS256, "k1", claims, map[string]any{"crit": []string{"exp"}})), `no key with id "k1"`},
		{"JSON serialization", signToken(t, testKeys()[0], jose.RS256, "k1", claims, nil).FullSerialize(), "parse:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			payload, err := ks.VerifySignature(t.Context(), tt.token)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("VerifySignature: %v", err)
				}
				var got map[string]any
				if err := json.Unmarshal(payload, &got); err != nil || got["sub"] != controllerSub {
					t.Errorf("payload = %s, want the token's claims", payload)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("VerifySignature error = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestUsableKeys(t *testing.T) {
	weak, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	raw := []json.RawMessage{
		mustJSON(t, jose.JSONWebKey{Key: testKeys()[0].Public(), KeyID: "rsa"}),
		mustJSON(t, jose.JSONWebKey{Key: ecKey.Public(), KeyID: "ec", Use: "sig"}),
		mustJSON(t, jose.JSONWebKey{Key: weak.Public(), KeyID: "weak"}),
		mustJSON(t, jose.JSONWebKey{Key: testKeys()[1].Public(), KeyID: "enc", Use: "enc"}),
		mustJSON(t, jose.JSONWebKey{Key: []byte("0123456789abcdef0123456789abcdef"), KeyID: "hmac"}),
		mustJSON(t, jose.JSONWebKey{Key: testKeys()[2], KeyID: "private"}),
		json.RawMessage(`{"kty":"OKP","crv":"X448","x":"AA"}`),
	}
	keys, skipped := jwt.UsableKeys(raw)
	var kids []string
	for _, k := range keys {
		kids = append(kids, k.KeyID)
	}
	if diff := cmp.Diff([]string{"rsa", "ec"}, kids); diff != "" || skipped != 5 {
		t.Errorf("usable kids (-want +got):\n%s\nskipped %d, want 5", diff, skipped)
	}
}

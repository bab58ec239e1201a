package webhook

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"crucible.dev/crucible/internal/jwt/jwttest"
)

// fuzzState is a well-formed state file, for the fuzz seeds and the
// stores' tests.
func fuzzState(f testing.TB) []byte {
	f.Helper()
	jwks, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{jwttest.PublicJWK(testKeys()[0], "k1", jose.RS256)}})
	if err != nil {
		f.Fatal(err)
	}
	data, err := json.Marshal(persisted{
		Version:      stateVersion,
		Provider:     "hub",
		Issuer:       hubIssuer,
		DiscoveryURL: "https://mirror.example/.well-known/openid-configuration",
		FetchedAt:    time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC),
		Discovery:    json.RawMessage(`{"issuer":"` + hubIssuer + `","jwks_uri":"https://mirror.example/openid/v1/jwks"}`),
		JWKS:         jwks,
	})
	if err != nil {
		f.Fatal(err)
	}
	return data
}

// FuzzDecodeState: the state decoder never panics, every refusal wraps
// errStateRefused, and an accepted file holds what trustState relies on:
// its identity, a fetch time and at least one usable key.
func FuzzDecodeState(f *testing.F) {
	good := fuzzState(f)
	for _, seed := range [][]byte{
		good,
		good[:len(good)/2],
		append(append([]byte{}, good...), good...),
		[]byte(`{}`),
		[]byte(`null`),
		[]byte(`[]`),
		[]byte(`{"version":1,"provider":"hub","issuer":"i","discoveryURL":"d","fetchedAt":"2026-12-04T12:00:00Z","discovery":{"issuer":"i"},"jwks":{"keys":[{"kty":"oct","k":"AAAA"}]}}`),
		[]byte(`{"version":1,"fetchedAt":"not a time"}`),
		[]byte(`{"version":1,"provider":"hub","provider":"other"}`),
		[]byte(`{"jwks":{"keys":[{"kty":"RSA","n":"","e":""}]}}`),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, keys, err := decodeState(data)
		if err != nil {
			if !errors.Is(err, errStateRefused) {
				t.Fatalf("error %v does not wrap errStateRefused", err)
			}
			return
		}
		if p.Version != stateVersion || p.Provider == "" || p.Issuer == "" || p.DiscoveryURL == "" || p.FetchedAt.IsZero() || len(keys) == 0 {
			t.Fatalf("accepted state breaks an invariant: %+v with %d keys", p, len(keys))
		}
		for _, k := range keys {
			if !k.IsPublic() || k.Key == nil {
				t.Fatalf("accepted a key that is not public: kid %q", k.KeyID)
			}
		}
	})
}

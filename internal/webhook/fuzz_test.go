package webhook

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	jose "github.com/go-jose/go-jose/v4"

	"crucible.dev/crucible/internal/jwt"
	"crucible.dev/crucible/internal/jwt/jwttest"
)

// FuzzParseConfig: the decoder never panics, every error wraps
// ErrInvalidConfig, and an accepted config holds its invariants.
func FuzzParseConfig(f *testing.F) {
	for _, seed := range []string{
		validConfig,
		"providers:\n" + providerEntry,
		"jwksMinRefreshInterval: 1s\nproviders:\n" + providerEntry + strings.Replace(providerEntry, "name: hub", "name: dock", 1),
		"",
		"providers: [",
		"providers: null",
		"providers: [{}]",
		"- 1",
		"jwksMinRefreshInterval: -5s",
		"providers: [{name: a, issuer: {url: '://'}}]",
		"providers: [{claimMappings: {username: {expression: 'claims.'}}}]",
		"&a [*a]",
		"{\"providers\": [{\"name\": 1}]}",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := ParseConfig(data)
		if err != nil {
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("error %v does not wrap ErrInvalidConfig", err)
			}
			return
		}
		if len(cfg.Providers) == 0 || cfg.JWKSMinRefreshInterval < minJWKSMinRefreshInterval {
			t.Fatalf("accepted an invalid config: %+v", cfg)
		}
		issuers := map[string]bool{}
		for _, p := range cfg.Providers {
			if p.Name == "" || p.JWT.Issuer.URL == "" || issuers[p.JWT.Issuer.URL] || len(p.JWT.Issuer.Audiences) == 0 {
				t.Fatalf("accepted an invalid provider: %+v", p)
			}
			issuers[p.JWT.Issuer.URL] = true
		}
	})
}

// FuzzRoute: routing never panics, routes only well-shaped tokens of a
// configured issuer to that issuer's provider, and refuses everything else
// as malformed or unmatched.
func FuzzRoute(f *testing.F) {
	r := newRouter[string]()
	r.byIssuer[hubIssuer] = "hub"
	r.byIssuer["https://dock.example"] = "dock"

	seg := base64.RawURLEncoding.EncodeToString
	for _, seed := range []string{
		hubToken(f, hubClaims()),
		hubToken(f, with(hubClaims(), map[string]any{"iss": "https://dock.example"})),
		hubToken(f, with(hubClaims(), map[string]any{"iss": "https://other.example"})),
		jwttest.JWS(f, testKeys()[0], jose.RS256, "k1", hubClaims(), nil).FullSerialize(),
		seg([]byte(`{"alg":"none"}`)) + "." + seg([]byte(`{"iss":"https://kubernetes.default.svc"}`)) + ".",
		seg([]byte(`{"alg":"RS256","crit":["exp"]}`)) + "." + seg([]byte(`{"iss":"https://kubernetes.default.svc"}`)) + ".c2ln",
		seg([]byte(`{"alg":"RS256"}`)) + "." + seg([]byte(`{"iss":1}`)) + ".c2ln",
		seg([]byte(`{"alg":"RS256"}`)) + "." + seg([]byte(`null`)) + ".c2ln",
		seg([]byte(`{"alg":"RS256"}`)) + "." + seg([]byte(`{"iss":"https://kubernetes.default.svc","iss":"https://dock.example"}`)) + ".c2ln",
		"", ".", "..", "...", "a.b.c", "{}.{}.{}", "e30.e30.e30",
		strings.Repeat("a", jwt.MaxTokenBytes) + "..",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, token string) {
		p, tok, ok, err := r.route(token)
		switch {
		case err != nil:
			if ok || !errors.Is(err, jwt.ErrMalformed) {
				t.Fatalf("route error %v with ok=%v, want jwt.ErrMalformed and not ok", err, ok)
			}
		case ok:
			if r.byIssuer[tok.Claims.Issuer] != p || len(token) > jwt.MaxTokenBytes || strings.Count(token, ".") != 2 || strings.HasPrefix(token, "{") {
				t.Fatalf("routed %q to %q with issuer %q", token, p, tok.Claims.Issuer)
			}
		default:
			if _, known := r.byIssuer[tok.Claims.Issuer]; known {
				t.Fatalf("issuer %q is configured but the token was not routed", tok.Claims.Issuer)
			}
		}
	})
}

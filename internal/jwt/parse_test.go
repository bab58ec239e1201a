package jwt

import (
	"errors"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/google/go-cmp/cmp"

	"crucible.dev/crucible/internal/jwt/jwttest"
)

func TestParse(t *testing.T) {
	hdr := map[string]any{"alg": "ES384", "kid": "k1", "typ": "JWT"}
	full := map[string]any{"iss": "https://i", "sub": "s", "aud": []string{"a", "b"}, "exp": 2000000000, "nbf": 1000.9, "iat": 999}
	tests := []struct {
		name   string
		token  string
		want   Token
		reason string // "" when accepted
	}{
		{"full", jwttest.Raw(hdr, full, "sig"), Token{Algorithm: jose.ES384, KeyID: "k1", Claims: Claims{
			Issuer: "https://i", Subject: "s", Audience: []string{"a", "b"},
			Expiry: time.Unix(2000000000, 0).UTC(), NotBefore: time.Unix(1000, 0).UTC(), IssuedAt: time.Unix(999, 0).UTC(),
		}}, ""},
		{"aud as a string, nothing else", jwttest.Raw(map[string]any{"alg": "RS256"}, map[string]any{"aud": "a"}, ""),
			Token{Algorithm: jose.RS256, Claims: Claims{Audience: []string{"a"}}}, ""},
		{"huge exp is clamped", jwttest.Raw(hdr, map[string]any{"exp": 1e300}, "s"),
			Token{Algorithm: jose.ES384, KeyID: "k1", Claims: Claims{Expiry: time.Unix(maxNumericDate, 0).UTC()}}, ""},
		{"oversized", jwttest.Raw(hdr, full, strings.Repeat("A", MaxTokenBytes)), Token{}, ReasonTooLarge},
		{"two parts", "a.b", Token{}, ReasonMalformed},
		{"four parts", jwttest.Raw(hdr, full, "s") + ".x", Token{}, ReasonMalformed},
		{"JSON serialization", `{"payload":"a.b","signature":"c"}`, Token{}, ReasonMalformed},
		{"header not base64", "!!." + jwttest.Raw(hdr, full, "s")[strings.Index(jwttest.Raw(hdr, full, "s"), ".")+1:], Token{}, ReasonMalformed},
		{"alg none", jwttest.Raw(map[string]any{"alg": "none"}, full, ""), Token{}, ReasonAlg},
		{"alg HS256", jwttest.Raw(map[string]any{"alg": "HS256"}, full, "s"), Token{}, ReasonAlg},
		{"alg missing", jwttest.Raw(map[string]any{"kid": "k1"}, full, "s"), Token{}, ReasonAlg},
		{"alg not a string", jwttest.Raw(map[string]any{"alg": 256}, full, "s"), Token{}, ReasonAlg},
		{"alg in other case", jwttest.Raw(map[string]any{"alg": "rs256"}, full, "s"), Token{}, ReasonAlg},
		{"crit", jwttest.Raw(map[string]any{"alg": "RS256", "crit": []string{"b64"}}, full, "s"), Token{}, ReasonCrit},
		{"kid not a string", jwttest.Raw(map[string]any{"alg": "RS256", "kid": 1}, full, "s"), Token{}, ReasonMalformed},
		{"duplicate alg", "eyJhbGciOiJSUzI1NiIsImFsZyI6Im5vbmUifQ.e30.s", Token{}, ReasonMalformed},
		{"claims not an object", jwttest.Raw(hdr, []string{"iss"}, "s"), Token{}, ReasonMalformed},
		{"iss not a string", jwttest.Raw(hdr, map[string]any{"iss": 1}, "s"), Token{}, ReasonMalformed},
		{"aud array of numbers", jwttest.Raw(hdr, map[string]any{"aud": []int{1}}, "s"), Token{}, ReasonMalformed},
		{"aud null", jwttest.Raw(hdr, map[string]any{"aud": nil}, "s"), Token{}, ReasonMalformed},
		{"sub null", jwttest.Raw(hdr, map[string]any{"sub": nil}, "s"), Token{}, ReasonMalformed},
		{"exp null", jwttest.Raw(hdr, map[string]any{"exp": nil}, "s"), Token{}, ReasonMalformed},
		{"exp a string", jwttest.Raw(hdr, map[string]any{"exp": "soon"}, "s"), Token{}, ReasonMalformed},
		{"duplicate sub in other case", jwttest.Raw(hdr, map[string]any{"sub": "a", "SUB": "b"}, "s"), Token{}, ReasonMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.token)
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("Parse (-want +got):\n%s", diff)
				}
				return
			}
			var pe *ParseError
			if !errors.As(err, &pe) || pe.Reason != tt.reason || !errors.Is(err, ErrMalformed) {
				t.Errorf("Parse error = %v, want a ParseError with reason %s", err, tt.reason)
			}
		})
	}
}

func TestHasAudience(t *testing.T) {
	c := Claims{Audience: []string{"a", "b"}}
	if !c.HasAudience("x", "b") || c.HasAudience("x") || (Claims{}).HasAudience("a") {
		t.Error("HasAudience")
	}
}

// FuzzParse: Parse never panics, refuses with a ParseError, and accepts only
// compact tokens within the size cap with an allowed alg and no crit.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		token(f, 0, "k1"),
		jwttest.Raw(map[string]any{"alg": "none"}, claims(), ""),
		jwttest.Raw(map[string]any{"alg": "RS256", "crit": []string{"exp"}}, claims(), "c2ln"),
		jwttest.Raw(map[string]any{"alg": "ES512", "jku": "https://evil"}, map[string]any{"aud": []any{"a", 1}}, "c2ln"),
		jwttest.Raw(map[string]any{"alg": "RS256"}, map[string]any{"exp": 1e308, "nbf": -1e308}, ""),
		"eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJhIiwiaXNzIjoiYiJ9.c2ln", // duplicate iss
		"", ".", "..", "...", "a.b.c", "{}.{}.{}", "e30.e30.e30",
		strings.Repeat("a", MaxTokenBytes) + "..",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, token string) {
		tok, err := Parse(token)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) || !errors.Is(err, ErrMalformed) {
				t.Fatalf("Parse error %v is not a ParseError", err)
			}
			return
		}
		if len(token) > MaxTokenBytes || strings.Count(token, ".") != 2 || strings.HasPrefix(token, "{") {
			t.Fatalf("accepted a token of the wrong shape: %q", token)
		}
		if !strings.Contains(strings.Join(AlgorithmNames(), " "), string(tok.Algorithm)) || tok.Algorithm == "" {
			t.Fatalf("accepted alg %q", tok.Algorithm)
		}
		header, _ := DecodeSegment(token[:strings.Index(token, ".")])
		if _, crit := header["crit"]; crit {
			t.Fatal("accepted a crit header")
		}
	})
}

// FuzzVerify: Verify never panics and never returns a payload for a token
// the published key did not sign.
func FuzzVerify(f *testing.F) {
	fx := newFixture(f, 0, jwttest.PublicJWK(rsaKey(0), "k1", jose.RS256))
	valid := token(f, 0, "k1")
	for _, seed := range []string{valid, token(f, 1, "k1"), token(f, 0, ""), valid + "x", "a.b.c", ""} {
		f.Add(seed)
	}
	pub := rsaKey(0).Public()
	f.Fuzz(func(t *testing.T, token string) {
		payload, err := fx.ks.Verify(t.Context(), token)
		if err != nil {
			if payload != nil {
				t.Fatal("payload with an error")
			}
			return
		}
		jws, perr := jose.ParseSignedCompact(token, []jose.SignatureAlgorithm{jose.RS256})
		if perr != nil {
			t.Fatalf("verified an unparseable token: %v", perr)
		}
		if _, verr := jws.Verify(pub); verr != nil {
			t.Fatal("verified a token the key did not sign")
		}
	})
}

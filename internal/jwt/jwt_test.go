package jwt

import (
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"testing"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/google/go-cmp/cmp"

	"crucible.dev/crucible/internal/jwt/jwttest"
)

func TestDecodeSegment(t *testing.T) {
	enc := base64.RawURLEncoding.EncodeToString
	cases := []struct {
		name, seg string
		ok        bool
		sub       string
	}{
		{"object", enc([]byte(`{"sub":"a","iss":"b"}`)), true, `"a"`},
		{"case-folded duplicate", enc([]byte(`{"sub":"a","Sub":"b"}`)), false, ""},
		{"exact duplicate", enc([]byte(`{"sub":"a","sub":"b"}`)), false, ""},
		{"trailing data", enc([]byte(`{"sub":"a"}{}`)), false, ""},
		{"duplicate spelled with an escape", enc([]byte(`{"sub":"a","\u0073ub":"b"}`)), false, ""},
		{"duplicate after an escaped quote", enc([]byte(`{"x":"\":","sub":"a","sub":"b"}`)), false, ""},
		{"colons and braces inside strings", enc([]byte(`{"x":"a:b{c:[d","sub":"a","y":{"z":":"}}`)), true, `"a"`},
		{"escaped backslash before a quote", enc([]byte(`{"x":"\\","sub":"a"}`)), true, `"a"`},
		{"leading whitespace", enc([]byte(" \n{\"sub\":\"a\"}")), true, `"a"`},
		{"empty object", enc([]byte(`{}`)), true, ""},
		{"nested duplicates are the claim's business", enc([]byte(`{"sub":"a","x":{"k":1,"k":2}}`)), true, `"a"`},
		{"array", enc([]byte(`["sub"]`)), false, ""},
		{"null", enc([]byte(`null`)), false, ""},
		{"padded", base64.URLEncoding.EncodeToString([]byte(`{"a":1}`)) + "=", false, ""},
		{"not base64", "!!!", false, ""},
		{"not JSON", enc([]byte(`{sub:`)), false, ""},
	}
	for _, tc := range cases {
		m, err := DecodeSegment(tc.seg)
		if (err == nil) != tc.ok {
			t.Errorf("%s: err = %v, want ok=%v", tc.name, err, tc.ok)
			continue
		}
		if tc.ok && string(m["sub"]) != tc.sub {
			t.Errorf("%s: sub = %s, want %s (exact member name)", tc.name, m["sub"], tc.sub)
		}
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
	rsaKeys := jwttest.RSAKeys()
	raw := []json.RawMessage{
		mustJSON(t, jose.JSONWebKey{Key: rsaKeys[0].Public(), KeyID: "rsa"}),
		mustJSON(t, jose.JSONWebKey{Key: jwttest.ECKey(elliptic.P256()).Public(), KeyID: "ec", Use: "sig"}),
		mustJSON(t, jose.JSONWebKey{Key: jwttest.ECKey(elliptic.P521()).Public(), KeyID: "ec521"}),
		mustJSON(t, jose.JSONWebKey{Key: weak.Public(), KeyID: "weak"}),
		mustJSON(t, jose.JSONWebKey{Key: rsaKeys[1].Public(), KeyID: "enc", Use: "enc"}),
		mustJSON(t, jose.JSONWebKey{Key: []byte("0123456789abcdef0123456789abcdef"), KeyID: "hmac"}),
		mustJSON(t, jose.JSONWebKey{Key: rsaKeys[2], KeyID: "private"}),
		json.RawMessage(`{"kty":"OKP","crv":"X448","x":"AA"}`),
		json.RawMessage(`not json`),
	}
	keys, skipped := UsableKeys(raw)
	var kids []string
	for _, k := range keys {
		kids = append(kids, k.KeyID)
	}
	if diff := cmp.Diff([]string{"rsa", "ec", "ec521"}, kids); diff != "" || skipped != 6 {
		t.Errorf("usable kids (-want +got):\n%s\nskipped %d, want 6", diff, skipped)
	}
}

func BenchmarkParse(b *testing.B) {
	token := jwttest.Sign(b, jwttest.RSAKeys()[0], "RS256", "k1", map[string]any{
		"iss": "https://kubernetes.default.svc", "sub": "system:serviceaccount:crucible:crucible-controller",
		"aud": []string{"wharf"}, "iat": 1, "nbf": 1, "exp": 2, "jti": "4c1a0a57",
		"kubernetes.io": map[string]any{"namespace": "crucible", "serviceaccount": map[string]string{"name": "c", "uid": "5e6f"}},
	}, nil)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(token); err != nil {
			b.Fatal(err)
		}
	}
}

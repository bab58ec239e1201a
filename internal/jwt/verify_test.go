package jwt

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"strings"
	"testing"

	jose "github.com/go-jose/go-jose/v4"

	"crucible.dev/crucible/internal/jwt/jwttest"
)

// otherKeys are keys of each kind crucible verifies with that never sign in
// these tests (jwttest.ECKey is one key per curve, so P-256's is fresh).
func otherKeys(t testing.TB) []any {
	p256, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return []any{
		rsaKey(1).Public(),
		p256.Public(),
		jwttest.ECKey(elliptic.P384()).Public(),
		jwttest.ECKey(elliptic.P521()).Public(),
	}
}

// TestSignedTokenVerify: the lean check accepts exactly the tokens each key
// signed with its own algorithm, and nothing altered.
func TestSignedTokenVerify(t *testing.T) {
	p256 := jwttest.ECKey(elliptic.P256())
	c := claims()
	good := map[string]struct {
		token string
		key   any
	}{
		"RS256": {jwttest.Sign(t, rsaKey(0), jose.RS256, "k", c, nil), rsaKey(0).Public()},
		"ES256": {jwttest.Sign(t, p256, jose.ES256, "k", c, nil), p256.Public()},
	}
	for name, g := range good {
		st, err := parseSigned(g.token)
		if err != nil {
			t.Fatalf("%s: parse: %v", name, err)
		}
		if !st.verify(g.key) {
			t.Errorf("%s: its own key does not verify it", name)
		}
		header, payload, sig := split3(g.token)
		altered := map[string]string{
			"payload changed":     header + "." + flipMiddle(payload) + "." + sig,
			"signature changed":   header + "." + payload + "." + flipMiddle(sig),
			"signature truncated": header + "." + payload + "." + sig[:len(sig)-4],
		}
		for what, tok := range altered {
			if st, err := parseSigned(tok); err == nil && st.verify(g.key) {
				t.Errorf("%s with %s verifies", name, what)
			}
		}
		for _, other := range otherKeys(t) {
			if st.verify(other) {
				t.Errorf("%s verifies with an unrelated %T", name, other)
			}
		}
	}
	if st, err := parseSigned(jwttest.Sign(t, jwttest.ECKey(elliptic.P384()), jose.ES384, "k", c, nil)); err != nil || st.verify(p256.Public()) {
		t.Errorf("an ES384 token verifies with a P-256 key (err %v)", err)
	}
	if _, err := parseSigned(strings.TrimRight(good["RS256"].token, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")); err == nil {
		t.Error("a token with an empty signature parses")
	}
}

func split3(token string) (string, string, string) {
	parts := strings.SplitN(token, ".", 3)
	return parts[0], parts[1], parts[2]
}

// flipMiddle changes a base64url character in the middle of s to another
// one. (Not the last: its low bits may be padding a non-strict decoder
// ignores, so changing it can leave the decoded bytes as they were.)
func flipMiddle(s string) string {
	i := len(s) / 2
	repl := byte('A')
	if s[i] == 'A' {
		repl = 'B'
	}
	return s[:i] + string(repl) + s[i+1:]
}

// FuzzVerifyMatchesGoJose: the lean check agrees with go-jose's JWS
// verification: whatever it accepts, go-jose accepts with the same payload,
// and whatever go-jose accepts, it accepts unless Parse's stricter rules
// (alg list, crit) refuse the token first.
func FuzzVerifyMatchesGoJose(f *testing.F) {
	ec := jwttest.ECKey(elliptic.P256())
	keys := append(otherKeys(f), ec.Public(), rsaKey(0).Public())
	signers := []struct {
		key any
		alg jose.SignatureAlgorithm
	}{{rsaKey(0), jose.RS256}, {ec, jose.ES256}}
	for _, s := range signers {
		f.Add(jwttest.Sign(f, s.key, s.alg, "k", claims(), nil))
		f.Add(jwttest.Sign(f, s.key, s.alg, "", map[string]any{"sub": "x"}, nil))
	}
	f.Fuzz(func(t *testing.T, token string) {
		st, err := parseSigned(token)
		jws, joseErr := jose.ParseSignedCompact(token, Algorithms)
		for _, key := range keys {
			ours := err == nil && st.verify(key)
			var theirs []byte
			theirsErr := joseErr
			if joseErr == nil {
				theirs, theirsErr = jws.Verify(key)
			}
			if ours && (theirsErr != nil || !bytes.Equal(theirs, st.payload)) {
				t.Fatalf("lean check accepts %q with %T, go-jose: %v", token, key, theirsErr)
			}
			if !ours && theirsErr == nil && err == nil {
				t.Fatalf("go-jose accepts %q with %T, the lean check does not", token, key)
			}
		}
	})
}

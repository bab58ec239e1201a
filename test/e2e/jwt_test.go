package e2e

import (
	"crypto"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"testing"
	"time"
)

// forged builds JWTs the way kube-apiserver's service-account signer does, so
// tests can make tokens a TokenRequest never would: expired, with extra
// headers, signed by a stranger's key.
type forged struct {
	header map[string]any
	claims map[string]any
}

// hubClaims are the claims of a hub token for sub with audience aud, valid now.
func hubClaims(sub string, aud ...string) map[string]any {
	now := time.Now()
	return map[string]any{
		"iss": "https://kubernetes.default.svc",
		"sub": sub,
		"aud": aud,
		"iat": now.Unix(),
		"nbf": now.Unix(),
		"exp": now.Add(10 * time.Minute).Unix(),
	}
}

// keyID is kube-apiserver's key id: the SHA-256 of the public key's DER.
func keyID(t testing.TB, key *rsa.PrivateKey) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(der)
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

func b64json(t testing.TB, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(data)
}

// signRS256 signs with key, setting kid from it unless the header has one.
func (f forged) signRS256(t testing.TB, key *rsa.PrivateKey) string {
	t.Helper()
	h := map[string]any{"alg": "RS256", "kid": keyID(t, key)}
	for k, v := range f.header {
		h[k] = v
	}
	input := b64json(t, h) + "." + b64json(t, f.claims)
	digest := sha256.Sum256([]byte(input))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, digest[:])
	if err != nil {
		t.Fatal(err)
	}
	return input + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// signHS256 signs with an HMAC secret: the classic confusion attack when the
// secret is the issuer's public key.
func (f forged) signHS256(t testing.TB, secret []byte, kid string) string {
	t.Helper()
	input := b64json(t, map[string]any{"alg": "HS256", "kid": kid}) + "." + b64json(t, f.claims)
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(input))
	return input + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// unsigned is alg none with an empty signature.
func (f forged) unsigned(t testing.TB, kid string) string {
	t.Helper()
	return b64json(t, map[string]any{"alg": "none", "kid": kid}) + "." + b64json(t, f.claims) + "."
}

func mustKey(t testing.TB) *rsa.PrivateKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

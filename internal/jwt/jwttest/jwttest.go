// Package jwttest signs test tokens for the packages that verify them
// (internal/jwt, internal/webhook, internal/ingest), so each test suite
// does not grow its own signer and key cache.
package jwttest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"sync"
	"testing"

	jose "github.com/go-jose/go-jose/v4"
)

// RSAKeys are four 2048-bit keys, generated once per test binary: RSA
// generation dominates test time otherwise.
var RSAKeys = sync.OnceValue(func() []*rsa.PrivateKey {
	keys := make([]*rsa.PrivateKey, 4)
	for i := range keys {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			panic(err)
		}
		keys[i] = k
	}
	return keys
})

var (
	ecMu   sync.Mutex
	ecKeys = map[string]*ecdsa.PrivateKey{}
)

// ECKey is one key on curve (P-256, P-384 or P-521), generated once per
// curve and test binary.
func ECKey(curve elliptic.Curve) *ecdsa.PrivateKey {
	ecMu.Lock()
	defer ecMu.Unlock()
	name := curve.Params().Name
	if k, ok := ecKeys[name]; ok {
		return k
	}
	k, err := ecdsa.GenerateKey(curve, rand.Reader)
	if err != nil {
		panic(err)
	}
	ecKeys[name] = k
	return k
}

// JWS signs claims (marshalled to JSON) with key and alg, with typ JWT, kid
// when not empty and the extra headers given.
func JWS(t testing.TB, key any, alg jose.SignatureAlgorithm, kid string, claims any, headers map[string]any) *jose.JSONWebSignature {
	t.Helper()
	opts := (&jose.SignerOptions{}).WithType("JWT")
	if kid != "" {
		opts = opts.WithHeader("kid", kid)
	}
	for k, v := range headers {
		opts = opts.WithHeader(jose.HeaderKey(k), v)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, opts)
	if err != nil {
		t.Fatalf("new signer: %v", err)
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		t.Fatalf("marshal claims: %v", err)
	}
	jws, err := signer.Sign(payload)
	if err != nil {
		t.Fatalf("sign: %v", err)
	}
	return jws
}

// Sign is JWS in the compact serialization.
func Sign(t testing.TB, key any, alg jose.SignatureAlgorithm, kid string, claims any, headers map[string]any) string {
	t.Helper()
	s, err := JWS(t, key, alg, kid, claims, headers).CompactSerialize()
	if err != nil {
		t.Fatalf("serialize: %v", err)
	}
	return s
}

// Raw assembles a token from a header and claims (marshalled to JSON) and
// an arbitrary signature segment, for tokens no signer would make.
func Raw(header, claims any, sig string) string {
	enc := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			panic(err)
		}
		return base64.RawURLEncoding.EncodeToString(b)
	}
	return enc(header) + "." + enc(claims) + "." + sig
}

// PublicJWK is the public half of key as a signing JWK with kid and alg.
func PublicJWK(key crypto.Signer, kid string, alg jose.SignatureAlgorithm) jose.JSONWebKey {
	return jose.JSONWebKey{Key: key.Public(), KeyID: kid, Algorithm: string(alg), Use: "sig"}
}

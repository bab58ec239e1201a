package jwt

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"math/big"

	jose "github.com/go-jose/go-jose/v4"
)

// signedToken is a compact JWS split into what a signature check needs.
type signedToken struct {
	alg          jose.SignatureAlgorithm
	kid          string
	signingInput string // ASCII(BASE64URL(header) || '.' || BASE64URL(payload))
	payload      []byte
	sig          []byte
}

// parseSigned splits a compact JWS with the checks of Parse (split, then an
// alg in Algorithms, no crit header, typed kid) and decodes its payload and
// signature. It replaces go-jose's general JWS parser on the hot path of
// every review and upload: the algorithms are four, all with one signature
// in the compact form, and go-jose's parse cost as much as the RSA check.
func parseSigned(token string) (signedToken, error) {
	rawHeader, rawPayload, rawSig, err := split(token)
	if err != nil {
		return signedToken{}, err
	}
	header, err := parseHeader(rawHeader)
	if err != nil {
		return signedToken{}, err
	}
	payload, err := base64.RawURLEncoding.DecodeString(rawPayload)
	if err != nil {
		return signedToken{}, refuse(ReasonMalformed, "payload: %v", err)
	}
	sig, err := base64.RawURLEncoding.DecodeString(rawSig)
	if err != nil || len(sig) == 0 {
		return signedToken{}, refuse(ReasonMalformed, "signature is not base64url")
	}
	return signedToken{
		alg:          header.Algorithm,
		kid:          header.KeyID,
		signingInput: token[:len(rawHeader)+1+len(rawPayload)],
		payload:      payload,
		sig:          sig,
	}, nil
}

// verify reports whether key (a public key from a JWKS) signed t: RS256 with
// an RSA key, ES256/ES384/ES512 with an EC key on the matching curve and a
// fixed-size r||s signature (RFC 7518 3.4), as go-jose checks them.
func (t signedToken) verify(key any) bool {
	switch t.alg {
	case jose.RS256:
		pub, ok := key.(*rsa.PublicKey)
		if !ok {
			return false
		}
		digest := sha256.Sum256([]byte(t.signingInput))
		return rsa.VerifyPKCS1v15(pub, crypto.SHA256, digest[:], t.sig) == nil
	case jose.ES256:
		return t.verifyEC(key, elliptic.P256(), crypto.SHA256)
	case jose.ES384:
		return t.verifyEC(key, elliptic.P384(), crypto.SHA384)
	case jose.ES512:
		return t.verifyEC(key, elliptic.P521(), crypto.SHA512)
	}
	return false
}

func (t signedToken) verifyEC(key any, curve elliptic.Curve, hash crypto.Hash) bool {
	pub, ok := key.(*ecdsa.PublicKey)
	if !ok || pub.Curve != curve {
		return false
	}
	size := (curve.Params().BitSize + 7) / 8
	if len(t.sig) != 2*size {
		return false
	}
	var digest []byte
	switch hash {
	case crypto.SHA256:
		d := sha256.Sum256([]byte(t.signingInput))
		digest = d[:]
	case crypto.SHA384:
		d := sha512.Sum384([]byte(t.signingInput))
		digest = d[:]
	default:
		d := sha512.Sum512([]byte(t.signingInput))
		digest = d[:]
	}
	r := new(big.Int).SetBytes(t.sig[:size])
	s := new(big.Int).SetBytes(t.sig[size:])
	return ecdsa.Verify(pub, digest, r, s)
}

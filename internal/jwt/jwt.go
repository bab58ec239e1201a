// Package jwt owns the byte-level handling of JSON Web Tokens that the authn
// webhook and the drop-box share before any signature is checked: decoding a
// segment by exact member name, and deciding which published keys are fit to
// verify with. Both are security boundaries, so they exist once.
package jwt

import (
	"crypto/ecdsa"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"

	jose "github.com/go-jose/go-jose/v4"
)

// MinRSABits refuses weak RSA keys even if an issuer publishes them.
const MinRSABits = 2048

// DecodeSegment decodes one unpadded base64url JSON object. Members are kept
// by exact name (encoding/json would match struct fields ignoring case), the
// way JWT libraries read claims, so every reader sees the same values.
func DecodeSegment(seg string) (map[string]json.RawMessage, error) {
	data, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return nil, err
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(data, &members); err != nil {
		return nil, err
	}
	if members == nil {
		return nil, errors.New("not a JSON object")
	}
	return members, nil
}

// UsableKeys keeps the public signing keys crucible verifies with: RSA of at
// least MinRSABits and EC, with use absent or "sig". One odd key does not
// spoil the others, as issuers publish keys of several kinds.
func UsableKeys(raw []json.RawMessage) (keys []jose.JSONWebKey, skipped int) {
	for _, r := range raw {
		var key jose.JSONWebKey
		if err := key.UnmarshalJSON(r); err != nil || !usable(key) {
			skipped++
			continue
		}
		keys = append(keys, key)
	}
	return keys, skipped
}

func usable(key jose.JSONWebKey) bool {
	if key.Use != "" && key.Use != "sig" {
		return false
	}
	switch pub := key.Key.(type) {
	case *rsa.PublicKey:
		return pub.N.BitLen() >= MinRSABits
	case *ecdsa.PublicKey:
		return true
	default:
		return false
	}
}

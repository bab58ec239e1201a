// Package jwt owns the handling of JSON Web Tokens that the authn webhook
// and the drop-box share: the pre-parser that reads a token's header and
// claims by exact member name before any signature is checked (Parse, one
// MaxTokenBytes, one list of Algorithms), the choice of published keys fit
// to verify with (UsableKeys), and the one verification-key cache (KeySet)
// both verify signatures with. They are security boundaries, so each exists
// once; fetching keys stays with the callers, which reach their issuers
// differently.
package jwt

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	jose "github.com/go-jose/go-jose/v4"
)

// MinRSABits refuses weak RSA keys even if an issuer publishes them.
const MinRSABits = 2048

// DecodeSegment decodes one unpadded base64url JSON object. Members are kept
// by exact name (encoding/json would match struct fields ignoring case), the
// way JWT libraries read claims, so every reader sees the same values. Two
// members whose names differ only in case (or not at all) are refused: one
// reader could take the first and another the last, and no issuer writes
// them.
func DecodeSegment(seg string) (map[string]json.RawMessage, error) {
	data, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errors.New("not a JSON object")
	}
	members := map[string]json.RawMessage{}
	folded := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		name, _ := tok.(string) // object keys are always strings
		if folded[strings.ToLower(name)] {
			return nil, fmt.Errorf("duplicate member %q", name)
		}
		folded[strings.ToLower(name)] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		members[name] = v
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the JSON object")
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

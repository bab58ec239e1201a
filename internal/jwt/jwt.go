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
	"strings"

	jose "github.com/go-jose/go-jose/v4"
)

// MinRSABits refuses weak RSA keys even if an issuer publishes them.
const MinRSABits = 2048

// DecodeSegment decodes one unpadded base64url JSON object. Members are kept
// by exact name (encoding/json would match struct fields ignoring case), the
// way JWT libraries read claims, so every reader sees the same values. Two
// members whose names differ only in case (or not at all, escapes decoded)
// are refused: one reader could take the first and another the last, and no
// issuer writes them.
//
// It is on the path of every token the webhook and the drop-box see, so it
// decodes in one pass of encoding/json (which checks the syntax, refuses
// data after the object and decodes escaped names) and finds duplicates by
// counting the object's members in the checked bytes.
func DecodeSegment(seg string) (map[string]json.RawMessage, error) {
	data, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return nil, err
	}
	if first := bytes.TrimLeft(data, " \t\r\n"); len(first) == 0 || first[0] != '{' {
		return nil, errors.New("not a JSON object")
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(data, &members); err != nil {
		return nil, err
	}
	if n := topLevelMembers(data); n != len(members) {
		return nil, errors.New("duplicate member")
	}
	for name := range members {
		for other := range members {
			if name != other && strings.EqualFold(name, other) {
				return nil, fmt.Errorf("duplicate member %q", name)
			}
		}
	}
	return members, nil
}

// topLevelMembers counts the members of the JSON object in data, which
// encoding/json has already found valid: every member of the outer object
// has exactly one colon at depth one outside strings.
func topLevelMembers(data []byte) int {
	n, depth, inString := 0, 0, false
	for i := 0; i < len(data); i++ {
		c := data[i]
		if inString {
			switch c {
			case '\\':
				i++ // the escaped character, which may be a quote
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		case ':':
			if depth == 1 {
				n++
			}
		}
	}
	return n
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

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
	"slices"
	"strings"
	"unicode/utf8"

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
// does not decode member by member: encoding/json checks the syntax once
// (json.Valid: one object, nothing after it), then a walk over the checked
// bytes cuts out each member, its value kept as a slice of the decoded
// segment rather than a copy.
func DecodeSegment(seg string) (map[string]json.RawMessage, error) {
	data, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return nil, err
	}
	if !json.Valid(data) {
		return nil, errors.New("not valid JSON")
	}
	i := skipSpace(data, 0)
	if data[i] != '{' {
		return nil, errors.New("not a JSON object")
	}
	members := map[string]json.RawMessage{}
	var folded foldedNames
	for i = skipSpace(data, i+1); data[i] != '}'; {
		end := skipString(data, i)
		name, err := memberName(data[i:end])
		if err != nil {
			return nil, err
		}
		if !folded.add(strings.ToLower(name)) {
			return nil, fmt.Errorf("duplicate member %q", name)
		}
		start := skipSpace(data, skipSpace(data, end)+1) // past the colon
		i = skipValue(data, start)
		members[name] = data[start:i:i]
		if i = skipSpace(data, i); data[i] == ',' {
			i = skipSpace(data, i+1)
		}
	}
	return members, nil
}

// foldedNames are the lower-cased member names of one object. A token's
// objects have a handful of members, compared in a slice on the stack
// rather than a map allocated for every segment of every token; past
// smallObject they move to a map, so that a hostile segment of thousands
// of members costs a hash each, not a comparison with every other.
type foldedNames struct {
	small [smallObject]string
	n     int
	many  map[string]struct{}
}

const smallObject = 16

// add records lower and reports false if it was recorded already.
func (f *foldedNames) add(lower string) bool {
	if f.many != nil {
		if _, dup := f.many[lower]; dup {
			return false
		}
		f.many[lower] = struct{}{}
		return true
	}
	if slices.Contains(f.small[:f.n], lower) {
		return false
	}
	if f.n < smallObject {
		f.small[f.n], f.n = lower, f.n+1
		return true
	}
	f.many = make(map[string]struct{}, 2*smallObject)
	for _, s := range f.small {
		f.many[s] = struct{}{}
	}
	f.many[lower] = struct{}{}
	return true
}

// knownNames are the member names every token has (RFC 7515's and 7519's,
// and kube-apiserver's own claim), handed out without a copy of their bytes.
var knownNames = func() map[string]string {
	m := map[string]string{}
	for _, n := range []string{"alg", "kid", "typ", "cty", "iss", "sub", "aud", "exp", "nbf", "iat", "jti", "kubernetes.io"} {
		m[n] = n
	}
	return m
}()

// memberName decodes a member name: its bytes when it has no escape and is
// valid UTF-8 (as encoding/json would return them), else encoding/json's
// decoding.
func memberName(quoted []byte) (string, error) {
	inner := quoted[1 : len(quoted)-1]
	if name, ok := knownNames[string(inner)]; ok { // a lookup by the bytes, no copy
		return name, nil
	}
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return string(inner), nil
	}
	var name string
	err := json.Unmarshal(quoted, &name)
	return name, err
}

// The walkers below run over JSON that json.Valid accepted, so they need not
// check its syntax; each returns the index just past what it skipped.

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// skipString skips the string starting at data[i] (a quote).
func skipString(data []byte, i int) int {
	for i++; i < len(data); i++ {
		switch data[i] {
		case '\\':
			i++ // the escaped character, which may be a quote
		case '"':
			return i + 1
		}
	}
	return len(data)
}

// skipValue skips the value starting at data[i].
func skipValue(data []byte, i int) int {
	switch data[i] {
	case '"':
		return skipString(data, i)
	case '{', '[':
		depth := 0
		for i < len(data) {
			switch data[i] {
			case '"':
				i = skipString(data, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return len(data)
	default: // number, true, false, null
		for ; i < len(data); i++ {
			switch data[i] {
			case ',', '}', ']', ' ', '\t', '\r', '\n':
				return i
			}
		}
		return i
	}
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

package webhook

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	jose "github.com/go-jose/go-jose/v4"

	"crucible.dev/crucible/internal/jwt"
)

// maxTokenBytes caps tokens before anything parses them: the JWT library
// underneath uses go-jose v2, whose parser allocates in proportion to odd
// inputs (CVE-2025-27144). A projected service-account token is about 1 KiB.
const maxTokenBytes = 16 << 10

// signingAlgs are the algorithms kube-apiserver signs service-account tokens
// with (RS256 for RSA keys, ES* for EC keys). HS* and none can never pass.
var signingAlgs = []jose.SignatureAlgorithm{jose.RS256, jose.ES256, jose.ES384, jose.ES512}

// signingAlgNames is signingAlgs for the JWT library's options.
func signingAlgNames() []string {
	names := make([]string, len(signingAlgs))
	for i, a := range signingAlgs {
		names[i] = string(a)
	}
	return names
}

// errMalformed marks tokens refused before any signature check.
var errMalformed = errors.New("malformed token")

// untrusted holds what a token claims about itself before its signature is
// checked. The issuer and key id only pick a provider and a key; the subject
// is trusted once the JWT library has verified this exact token.
type untrusted struct {
	Issuer  string
	Subject string
	KeyID   string
}

// parseUntrusted checks a token's shape and reads its header and claims
// without verifying anything. Every refusal wraps errMalformed.
func parseUntrusted(token string) (untrusted, error) {
	if len(token) > maxTokenBytes {
		return untrusted{}, fmt.Errorf("%w: longer than %d bytes", errMalformed, maxTokenBytes)
	}
	if strings.HasPrefix(token, "{") || strings.Count(token, ".") != 2 {
		return untrusted{}, fmt.Errorf("%w: not a compact JWS (three dot-separated parts)", errMalformed)
	}
	rawHeader, rest, _ := strings.Cut(token, ".")
	rawClaims, _, _ := strings.Cut(rest, ".")
	kid, err := readHeader(rawHeader)
	if err != nil {
		return untrusted{}, fmt.Errorf("%w: header: %v", errMalformed, err)
	}
	iss, sub, err := readClaims(rawClaims)
	if err != nil {
		return untrusted{}, fmt.Errorf("%w: claims: %v", errMalformed, err)
	}
	return untrusted{Issuer: iss, Subject: sub, KeyID: kid}, nil
}

// readHeader returns the key id of a header with a supported alg and no
// crit member (RFC 7515 4.1.11: critical extensions must be understood, and
// crucible understands none).
func readHeader(seg string) (kid string, err error) {
	header, err := jwt.DecodeSegment(seg)
	if err != nil {
		return "", err
	}
	alg, err := stringMember(header, "alg")
	if err != nil || !slices.Contains(signingAlgs, jose.SignatureAlgorithm(alg)) {
		return "", errors.New("unsupported alg")
	}
	if _, ok := header["crit"]; ok {
		return "", errors.New("crit member")
	}
	return stringMember(header, "kid")
}

func readClaims(seg string) (iss, sub string, err error) {
	claims, err := jwt.DecodeSegment(seg)
	if err != nil {
		return "", "", err
	}
	if iss, err = stringMember(claims, "iss"); err != nil {
		return "", "", err
	}
	if sub, err = stringMember(claims, "sub"); err != nil {
		return "", "", err
	}
	return iss, sub, nil
}

// stringMember returns a string member, "" when absent.
func stringMember(members map[string]json.RawMessage, name string) (string, error) {
	raw, ok := members[name]
	if !ok {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("%s is not a string", name)
	}
	return s, nil
}

// router picks the provider for a token by its unverified iss claim. Issuers
// are unique across providers (validation enforces it), so at most one
// matches; the match is byte for byte, as in kube-apiserver.
type router[P any] struct {
	byIssuer map[string]P
}

func newRouter[P any]() router[P] {
	return router[P]{byIssuer: map[string]P{}}
}

// route returns the token's provider and its untrusted content. ok is false
// when no provider's issuer matches; err is set when the token is malformed.
func (r router[P]) route(token string) (p P, tok untrusted, ok bool, err error) {
	tok, err = parseUntrusted(token)
	if err != nil {
		return p, tok, false, err
	}
	p, ok = r.byIssuer[tok.Issuer]
	return p, tok, ok, nil
}

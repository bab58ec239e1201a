package jwt

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	jose "github.com/go-jose/go-jose/v4"
)

// MaxTokenBytes caps tokens before anything parses them: go-jose's parser
// allocates in proportion to odd inputs (CVE-2025-27144), and the webhook's
// JWT library still runs go-jose v2 underneath. A projected service-account
// token is about 1 KiB.
const MaxTokenBytes = 16 << 10

// Algorithms are the signature algorithms kube-apiserver signs
// service-account tokens with: RS256 for RSA keys, ES256/ES384/ES512 for
// P-256/P-384/P-521 keys. HS* and none can never pass.
var Algorithms = []jose.SignatureAlgorithm{jose.RS256, jose.ES256, jose.ES384, jose.ES512}

// AlgorithmNames is Algorithms as strings, for libraries that take names.
func AlgorithmNames() []string {
	names := make([]string, len(Algorithms))
	for i, a := range Algorithms {
		names[i] = string(a)
	}
	return names
}

// ErrMalformed is wrapped by every refusal of Parse and by Verify for
// tokens that are not a compact JWS with an allowed algorithm.
var ErrMalformed = errors.New("malformed token")

// Reasons a token is refused before any signature check (metric labels).
const (
	ReasonTooLarge  = "too_large"
	ReasonMalformed = "malformed"
	ReasonAlg       = "alg"
	ReasonCrit      = "crit"
)

// ParseError is a refusal by Parse. It matches ErrMalformed with errors.Is.
type ParseError struct {
	Reason string // one of the Reason constants
	Detail string // never contains the token
}

func (e *ParseError) Error() string { return "malformed token: " + e.Reason + ": " + e.Detail }

// Is makes every ParseError match ErrMalformed.
func (e *ParseError) Is(target error) bool { return target == ErrMalformed }

func refuse(reason, format string, args ...any) error {
	return &ParseError{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// Token is what a compact JWS says about itself before its signature is
// checked. Nothing here may grant access: the issuer and key id only pick
// a provider or a key, and the rest is trusted once a signature verifies.
type Token struct {
	Algorithm jose.SignatureAlgorithm
	KeyID     string
	Claims    Claims
}

// Claims are the registered claims crucible reads, by exact member name.
// Times are zero when the claim is absent.
type Claims struct {
	Issuer    string
	Subject   string
	Audience  []string // a single string is a one-element list (RFC 7519 4.1.3)
	Expiry    time.Time
	NotBefore time.Time
	IssuedAt  time.Time
}

// HasAudience reports whether any of the token's audiences is in auds.
func (c Claims) HasAudience(auds ...string) bool {
	return slices.ContainsFunc(c.Audience, func(a string) bool { return slices.Contains(auds, a) })
}

// Parse checks a token's shape and reads its header and claims without
// verifying anything: at most MaxTokenBytes, the compact serialization (the
// JSON one is refused), an alg in Algorithms, no crit header (RFC 7515
// 4.1.11: crucible understands no critical extension), and typed claims.
// jku, x5u, jwk and x5c headers are ignored: keys come only from a key set.
// Every refusal is a *ParseError.
func Parse(token string) (Token, error) {
	rawHeader, rawClaims, _, err := split(token)
	if err != nil {
		return Token{}, err
	}
	tok, err := parseHeader(rawHeader)
	if err != nil {
		return Token{}, err
	}
	if tok.Claims, err = parseClaims(rawClaims); err != nil {
		return Token{}, err
	}
	return tok, nil
}

// split cuts a compact JWS of at most MaxTokenBytes into its three
// segments, still encoded; the JSON serialization is refused.
func split(token string) (header, payload, sig string, err error) {
	if len(token) > MaxTokenBytes {
		return "", "", "", refuse(ReasonTooLarge, "longer than %d bytes", MaxTokenBytes)
	}
	if strings.HasPrefix(token, "{") || strings.Count(token, ".") != 2 {
		return "", "", "", refuse(ReasonMalformed, "not a compact JWS (three dot-separated parts)")
	}
	header, rest, _ := strings.Cut(token, ".")
	payload, sig, _ = strings.Cut(rest, ".")
	return header, payload, sig, nil
}

func parseHeader(seg string) (Token, error) {
	header, err := DecodeSegment(seg)
	if err != nil {
		return Token{}, refuse(ReasonMalformed, "header: %v", err)
	}
	alg, err := stringMember(header, "alg")
	if err != nil || !slices.Contains(Algorithms, jose.SignatureAlgorithm(alg)) {
		return Token{}, refuse(ReasonAlg, "alg not one of %v", AlgorithmNames())
	}
	if _, ok := header["crit"]; ok {
		return Token{}, refuse(ReasonCrit, "crit header")
	}
	kid, err := stringMember(header, "kid")
	if err != nil {
		return Token{}, refuse(ReasonMalformed, "header: %v", err)
	}
	return Token{Algorithm: jose.SignatureAlgorithm(alg), KeyID: kid}, nil
}

func parseClaims(seg string) (Claims, error) {
	members, err := DecodeSegment(seg)
	if err != nil {
		return Claims{}, refuse(ReasonMalformed, "claims: %v", err)
	}
	var c Claims
	var errs [6]error // every claim's, nil for most: an array, not an append per claim
	c.Issuer, errs[0] = stringMember(members, "iss")
	c.Subject, errs[1] = stringMember(members, "sub")
	c.Audience, errs[2] = audienceMember(members)
	c.Expiry, errs[3] = timeMember(members, "exp")
	c.NotBefore, errs[4] = timeMember(members, "nbf")
	c.IssuedAt, errs[5] = timeMember(members, "iat")
	if err := errors.Join(errs[:]...); err != nil {
		return Claims{}, refuse(ReasonMalformed, "claims: %v", err)
	}
	return c, nil
}

// stringMember returns a string member, "" when absent.
func stringMember(members map[string]json.RawMessage, name string) (string, error) {
	raw, ok := members[name]
	if !ok {
		return "", nil
	}
	s, ok := jsonString(raw)
	if !ok {
		return "", fmt.Errorf("%s is not a string", name)
	}
	return s, nil
}

// jsonString decodes a JSON string value (never null). Members come from
// DecodeSegment, so raw is valid JSON: a string without escapes and with
// valid UTF-8 is its bytes between the quotes, which saves encoding/json's
// reflection on every claim of every token; anything else goes through
// encoding/json.
func jsonString(raw json.RawMessage) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	if inner := raw[1 : len(raw)-1]; bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return string(inner), true
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}

// jsonStrings decodes a JSON array whose every element jsonString reads
// (raw is valid JSON, from DecodeSegment), without encoding/json's
// reflection: kube-apiserver's tokens carry aud as an array. Anything
// else (a null element, a nested value) is left to encoding/json.
func jsonStrings(raw json.RawMessage) ([]string, bool) {
	if len(raw) < 2 || raw[0] != '[' {
		return nil, false
	}
	out := []string{}
	for i := skipSpace(raw, 1); raw[i] != ']'; {
		end := skipValue(raw, i)
		s, ok := jsonString(raw[i:end])
		if !ok {
			return nil, false
		}
		out = append(out, s)
		if i = skipSpace(raw, end); raw[i] == ',' {
			i = skipSpace(raw, i+1)
		}
	}
	return out, true
}

// audienceMember reads aud as a string or an array of strings.
func audienceMember(members map[string]json.RawMessage) ([]string, error) {
	raw, ok := members["aud"]
	if !ok {
		return nil, nil
	}
	if isNull(raw) {
		return nil, errors.New("aud is null")
	}
	if one, ok := jsonString(raw); ok {
		return []string{one}, nil
	}
	if many, ok := jsonStrings(raw); ok {
		return many, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil || many == nil {
		return nil, errors.New("aud is neither a string nor an array of strings")
	}
	return many, nil
}

// maxNumericDate bounds NumericDates to about 36,000 years either way, far
// beyond any real token, so huge values cannot overflow time arithmetic.
const maxNumericDate = 1 << 40

// timeMember reads a NumericDate (seconds since the epoch, fractions
// dropped), zero time when absent.
func timeMember(members map[string]json.RawMessage, name string) (time.Time, error) {
	raw, ok := members[name]
	if !ok {
		return time.Time{}, nil
	}
	f, err := jsonNumber(raw)
	if err != nil || math.IsNaN(f) {
		return time.Time{}, fmt.Errorf("%s is not a number", name)
	}
	return time.Unix(int64(max(-maxNumericDate, min(f, maxNumericDate))), 0).UTC(), nil
}

// jsonNumber decodes a JSON number. raw is valid JSON (from DecodeSegment),
// so one that starts with a digit or a minus is a number, whose syntax
// strconv.ParseFloat reads as encoding/json does; out-of-range values are
// refused as encoding/json refuses them.
func jsonNumber(raw json.RawMessage) (float64, error) {
	if len(raw) == 0 || (raw[0] != '-' && (raw[0] < '0' || raw[0] > '9')) {
		return 0, errors.New("not a number")
	}
	return strconv.ParseFloat(string(raw), 64)
}

// isNull reports a JSON null, which encoding/json would silently decode as
// the zero value.
func isNull(raw json.RawMessage) bool { return string(raw) == "null" }

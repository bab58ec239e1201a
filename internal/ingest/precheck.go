package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"crucible.dev/crucible/internal/jwt"
)

const (
	// maxTokenBytes caps tokens before anything parses them (go-jose
	// CVE-2025-27144); a projected service-account token is about 1 KiB.
	maxTokenBytes = 16 << 10
	// expLeeway is how long past its exp a token still passes the
	// pre-check (clock skew between the spoke and the controller).
	expLeeway = 30 * time.Second
)

// precheckAlgs are the algorithms kube-apiserver signs service-account
// tokens with. HS* and none can never pass.
var precheckAlgs = []jose.SignatureAlgorithm{jose.RS256, jose.ES256}

// errKeysUnavailable: no configured cluster has signing keys loaded, so the
// pre-check cannot decide (answered 503, not 401).
var errKeysUnavailable = errors.New("no cluster's signing keys are available")

// rejectError is a definitive pre-check refusal; reason is its metric label.
type rejectError struct{ reason string }

func (e *rejectError) Error() string { return "token refused by pre-check: " + e.reason }

func reject(reason string) error { return &rejectError{reason: reason} }

// claims is what the pre-check learns from a token it let through.
type claims struct {
	exp time.Time
}

// precheck refuses tokens that cannot be a live service-account token of a
// configured cluster (R-IN5): it can only reject, never accept — a token
// that passes still needs the TokenReview. Errors are *rejectError or wrap
// errKeysUnavailable.
func (h *Handler) precheck(ctx context.Context, token string) (claims, error) {
	if len(token) > maxTokenBytes {
		return claims{}, reject("too_large")
	}
	if strings.HasPrefix(token, "{") || strings.Count(token, ".") != 2 {
		return claims{}, reject("malformed")
	}
	rawHeader, rest, _ := strings.Cut(token, ".")
	rawClaims, _, _ := strings.Cut(rest, ".")
	kid, err := checkHeader(rawHeader)
	if err != nil {
		return claims{}, err
	}
	c, err := h.checkClaims(rawClaims)
	if err != nil {
		return claims{}, err
	}
	jws, err := jose.ParseSignedCompact(token, precheckAlgs)
	if err != nil || len(jws.Signatures) != 1 {
		return claims{}, reject("malformed")
	}
	if err := h.verifySignature(ctx, jws, kid); err != nil {
		return claims{}, err
	}
	return c, nil
}

// checkHeader returns the key id of a header with a supported alg and no
// crit member (crucible understands no critical extension). jku, x5u, jwk
// and x5c are ignored: keys come only from the clusters' JWKS.
func checkHeader(seg string) (kid string, err error) {
	header, err := jwt.DecodeSegment(seg)
	if err != nil {
		return "", reject("malformed")
	}
	var alg string
	if raw, ok := header["alg"]; !ok || json.Unmarshal(raw, &alg) != nil || !slices.Contains(precheckAlgs, jose.SignatureAlgorithm(alg)) {
		return "", reject("alg")
	}
	if _, ok := header["crit"]; ok {
		return "", reject("crit")
	}
	if raw, ok := header["kid"]; ok && json.Unmarshal(raw, &kid) != nil {
		return "", reject("malformed")
	}
	return kid, nil
}

// checkClaims requires exp (not past, within the leeway) and an aud that
// names one of the clusters' ingest audiences. iss is deliberately not
// compared: hub and spokes share https://kubernetes.default.svc, and only
// the keys tell them apart.
func (h *Handler) checkClaims(seg string) (claims, error) {
	members, err := jwt.DecodeSegment(seg)
	if err != nil {
		return claims{}, reject("malformed")
	}
	var exp float64
	if raw, ok := members["exp"]; !ok || json.Unmarshal(raw, &exp) != nil || math.IsNaN(exp) || exp <= 0 {
		return claims{}, reject("expired")
	}
	expires := time.Unix(int64(min(exp, 1<<40)), 0) // 1<<40 s is beyond any real token's life
	if h.opts.Now().After(expires.Add(expLeeway)) {
		return claims{}, reject("expired")
	}
	var auds []string
	if raw, ok := members["aud"]; ok {
		var one string
		if json.Unmarshal(raw, &one) == nil {
			auds = []string{one}
		} else if json.Unmarshal(raw, &auds) != nil {
			return claims{}, reject("audience")
		}
	}
	if !slices.ContainsFunc(auds, func(a string) bool { return slices.Contains(h.audiences, a) }) {
		return claims{}, reject("audience")
	}
	return claims{exp: expires}, nil
}

// verifySignature accepts a signature made by a key of any configured
// cluster. A kid no cluster knows triggers a refetch of the JWKS of those
// clusters, each at most once per JWKSMinRefresh, so random kids cannot turn
// into a flood of fetches.
func (h *Handler) verifySignature(ctx context.Context, jws *jose.JSONWebSignature, kid string) error {
	var stale []*keySet
	loaded := false
	for _, ks := range h.keySets {
		v := ks.verify(jws, kid)
		if v.ok {
			return nil
		}
		loaded = loaded || v.loaded
		if !v.kidKnown {
			stale = append(stale, ks)
		}
	}
	if len(stale) > 0 {
		// Re-verify even when this call fetched nothing: another request
		// may have loaded the keys while this one waited.
		h.refreshAll(ctx, stale)
		for _, ks := range stale {
			v := ks.verify(jws, kid)
			if v.ok {
				return nil
			}
			loaded = loaded || v.loaded
		}
	}
	if !loaded {
		return errKeysUnavailable
	}
	return reject("signature")
}

// refreshAll refetches the key sets concurrently, each one only if its rate
// limit allows.
func (h *Handler) refreshAll(ctx context.Context, sets []*keySet) {
	if len(sets) == 1 {
		sets[0].refresh(ctx)
		return
	}
	var wg sync.WaitGroup
	for _, ks := range sets {
		wg.Go(func() { ks.refresh(ctx) })
	}
	wg.Wait()
}

// verified is the outcome of checking a signature against one key set.
type verified struct {
	ok       bool // a key verified the signature
	kidKnown bool // the set has a key with the token's kid (any key when kid is "")
	loaded   bool // the set has keys at all
}

func (k *keySet) verify(jws *jose.JSONWebSignature, kid string) verified {
	keys := k.keys.Load()
	if keys == nil {
		return verified{}
	}
	v := verified{loaded: true, kidKnown: kid == ""}
	alg := jws.Signatures[0].Header.Algorithm
	for _, key := range *keys {
		if kid != "" && key.KeyID != kid {
			continue
		}
		v.kidKnown = true
		if key.Algorithm != "" && key.Algorithm != alg {
			continue
		}
		if _, err := jws.Verify(key.Key); err == nil {
			v.ok = true
			return v
		}
	}
	return v
}

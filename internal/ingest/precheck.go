package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"crucible.dev/crucible/internal/jwt"
)

// expLeeway is how long past its exp (or before its nbf) a token still
// passes the pre-check (clock skew between the spoke and the controller).
const expLeeway = 30 * time.Second

// errKeysUnavailable: a cluster the token may belong to cannot decide (no
// keys, a failing fetch, a refresh cut short) and no other cluster's keys
// verified it, so the pre-check answers 503, not 401.
var errKeysUnavailable = errors.New("signing keys unavailable")

// rejectError is a definitive pre-check refusal; reason is its metric label.
type rejectError struct{ reason string }

func (e *rejectError) Error() string { return "token refused by pre-check: " + e.reason }

func reject(reason string) error { return &rejectError{reason: reason} }

// prechecked is what the pre-check learns from a token it let through;
// its claims are those of a payload whose signature verified.
type prechecked struct {
	exp time.Time
	// verifiedBy are the clusters whose keys verified the signature. Only
	// they may be asked to review the token: a token signed by cluster A is
	// never sent to cluster B's TokenReview.
	verifiedBy []string
	// issuer is the token's iss, podName and podUID the pod it is bound to
	// ("" when it names none). The request's pod is compared with podName
	// before the store is read (refuseBeforeRead); the pod's cluster
	// compares the others with its issuer and the pod's row (refuseFinal),
	// so a refusal its TokenReview could only word as status.error is
	// answered without one.
	issuer, podName, podUID string
}

// precheck refuses tokens that cannot be a live service-account token of a
// configured cluster (R-IN5): it can only reject, never accept — a token
// that passes still needs the TokenReview. Errors are *rejectError or wrap
// errKeysUnavailable.
//
// iss does not pick the candidates: hub and spokes may share
// https://kubernetes.default.svc, and only the keys tell them apart. The
// clusters whose ingest audience the token names are its candidates; the
// issuer is compared later, with the pod's cluster's.
func (h *Handler) precheck(ctx context.Context, token string) (prechecked, error) {
	tok, err := jwt.Parse(token)
	if err != nil {
		reason := jwt.ReasonMalformed
		if pe := (*jwt.ParseError)(nil); errors.As(err, &pe) {
			reason = pe.Reason
		}
		return prechecked{}, reject(reason)
	}
	exp := tok.Claims.Expiry
	if exp.IsZero() || exp.Unix() <= 0 || h.opts.Now().After(exp.Add(expLeeway)) {
		return prechecked{}, reject("expired")
	}
	// Not yet valid: the spoke would answer its TokenReview with an error,
	// which reads as an outage (503); refuse it here as what it is.
	if nbf := tok.Claims.NotBefore; !nbf.IsZero() && nbf.After(h.opts.Now().Add(expLeeway)) {
		return prechecked{}, reject("not_yet_valid")
	}
	var candidates []*cluster
	for _, c := range h.validators.Load().order {
		if tok.Claims.HasAudience(c.Audience) {
			candidates = append(candidates, c)
		}
	}
	if len(candidates) == 0 {
		return prechecked{}, reject("audience")
	}
	verifiedBy, payload, err := verifyAcross(ctx, token, candidates)
	if err != nil {
		return prechecked{}, err
	}
	name, uid := boundPod(payload)
	return prechecked{exp: exp, verifiedBy: verifiedBy, issuer: tok.Claims.Issuer, podName: name, podUID: uid}, nil
}

// boundPod is the name and uid of the pod a projected token is bound to,
// from its kubernetes.io claim; "" when it names none or the claim has
// another shape (kube-apiserver then binds it to no pod either, and its
// TokenReview names none: decide could never accept it).
func boundPod(payload []byte) (name, uid string) {
	var claims struct {
		Kube struct {
			Pod struct {
				Name string `json:"name"`
				UID  string `json:"uid"`
			} `json:"pod"`
		} `json:"kubernetes.io"`
	}
	if json.Unmarshal(payload, &claims) != nil {
		return "", ""
	}
	return claims.Kube.Pod.Name, claims.Kube.Pod.UID
}

// verifyAcross returns the candidates whose keys verify token, and the
// verified payload. It first
// decides with the keys loaded, so a token of one cluster does not make the
// others fetch; only when none verifies does it refresh the candidates that
// lack the token's kid, each at most once per JWKSMinRefresh, so random kids
// cannot turn into a flood of fetches.
func verifyAcross(ctx context.Context, token string, candidates []*cluster) ([]string, []byte, error) {
	errs := make([]error, len(candidates))
	payloads := make([][]byte, len(candidates))
	for i, c := range candidates {
		payloads[i], errs[i] = c.keys.VerifyLoaded(token)
	}
	if verified, payload := verifiedNames(candidates, payloads, errs); len(verified) > 0 {
		return verified, payload, nil
	}
	var wg sync.WaitGroup
	for i, c := range candidates {
		if errors.Is(errs[i], jwt.ErrUnavailable) || errors.Is(errs[i], jwt.ErrUnknownKey) {
			wg.Go(func() { payloads[i], errs[i] = c.keys.Verify(ctx, token) })
		}
	}
	wg.Wait()
	if verified, payload := verifiedNames(candidates, payloads, errs); len(verified) > 0 {
		return verified, payload, nil
	}
	for i, err := range errs {
		if errors.Is(err, jwt.ErrUnavailable) {
			return nil, nil, fmt.Errorf("%w: cluster %s: %w", errKeysUnavailable, candidates[i].Name, err)
		}
	}
	for _, err := range errs {
		if errors.Is(err, jwt.ErrMalformed) {
			return nil, nil, reject(jwt.ReasonMalformed)
		}
	}
	return nil, nil, reject("signature")
}

// verifiedNames are the candidates that verified the token, with the
// payload (the same bytes whichever key verified them).
func verifiedNames(candidates []*cluster, payloads [][]byte, errs []error) ([]string, []byte) {
	var names []string
	var payload []byte
	for i, err := range errs {
		if err == nil {
			names = append(names, candidates[i].Name)
			payload = payloads[i]
		}
	}
	return names, payload
}

package ingest

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"

	"crucible.dev/crucible/internal/httperr"
	"crucible.dev/crucible/internal/lru"
	"crucible.dev/crucible/internal/metrics"
	"crucible.dev/crucible/internal/store"
)

func rateLimited(retryAfter string) *httperr.Error {
	return refuse(http.StatusTooManyRequests, "rate_limited", "too many requests").With("Retry-After", retryAfter)
}

// authorize runs checks 1–5 and the per-pod limit, and returns the pod's
// row when the request may push for pod.
//
// A failed request is charged to its source (chargeSource) and an
// authenticated one to its pod. Behind an ingress every client shares one
// source, so the source's bucket refuses only tokens no cluster signed —
// what anyone can send — and a pod is never delayed by a flood of them;
// signed tokens are bounded by their pod's limit and the caches instead,
// and pods behind one NAT address do not throttle each other.
func (h *Handler) authorize(r *http.Request, pod string) (store.WorkPod, error) {
	row, signed, err := h.authenticateRequest(r, pod)
	if err != nil {
		return row, h.chargeSource(r, signed, err)
	}
	if ok, after := h.allowPod(row.ID); !ok {
		h.log.Debug("drop-box: pod over its request rate", "pod", row.ID)
		return row, rateLimited(after)
	}
	return row, nil
}

// authenticateRequest runs checks 1–5; every refusal is an *httperr.Error.
// signed reports whether a cluster's key verified the token.
func (h *Handler) authenticateRequest(r *http.Request, pod string) (row store.WorkPod, signed bool, err error) {
	ctx := r.Context()
	if h.opts.insecureSkipAuth {
		metrics.IngestStoreReads.Inc()
		row, err := h.opts.Store.GetWorkPod(ctx, pod)
		if err != nil {
			return row, false, deny(http.StatusForbidden, err)
		}
		return row, false, nil
	}
	// 1. A bearer token.
	token, ok := bearer(r.Header.Get("Authorization"))
	if !ok {
		return store.WorkPod{}, false, deny(http.StatusUnauthorized, errors.New("no bearer token"))
	}
	hash := lru.TokenKey(token)
	tokenID := hash[:12] // identifies the token in logs; the token itself is never logged

	// 2. The local pre-check: shape, exp, audience, and which clusters'
	// keys verify the signature.
	pc, err := h.precheck(ctx, token)
	if err != nil {
		var rej *rejectError
		if errors.As(err, &rej) {
			metrics.IngestPrecheckRejects.WithLabelValues(rej.reason).Inc()
			h.log.Debug("token refused by pre-check", "token", tokenID, "reason", rej.reason)
			return store.WorkPod{}, false, deny(http.StatusUnauthorized, err)
		}
		return store.WorkPod{}, false, unavailable(err)
	}

	// 3. The pod the token is bound to, then the pod's row, on a cluster
	// whose keys signed the token.
	if err := h.refuseBeforeRead(pod, pc, hash, tokenID); err != nil {
		return store.WorkPod{}, true, err
	}
	row, cl, err := h.podRow(ctx, pod, pc, tokenID)
	if err != nil {
		h.chargeRefusedRead(pod, pc, hash, err)
		return row, true, err
	}

	// 4 and 5. The issuer and the bound pod, then the TokenReview, through
	// the caches.
	v, err := h.authenticate(ctx, cl, row, token, hash, pc)
	if err != nil {
		return row, true, unavailable(err)
	}
	if err := h.refusal(v, tokenID, row); err != nil {
		h.chargeRefusedRead(pod, pc, hash, err)
		return row, true, err
	}
	return row, true, nil
}

// podRow reads pod's row and its cluster, which must be one whose keys
// signed the token: its TokenReview is never asked about another cluster's
// token. A row that takes no more uploads is refused before any review.
func (h *Handler) podRow(ctx context.Context, pod string, pc prechecked, tokenID string) (store.WorkPod, *cluster, error) {
	metrics.IngestStoreReads.Inc()
	row, err := h.opts.Store.GetWorkPod(ctx, pod)
	if errors.Is(err, store.ErrNotFound) {
		return row, nil, deny(http.StatusForbidden, errUnknownPod)
	}
	if err != nil {
		return row, nil, unavailable(err)
	}
	cl, ok := h.validators.Load().byName[row.Cluster]
	if !ok {
		h.log.Warn("drop-box: pod's cluster has no validator", "pod", pod, "cluster", row.Cluster)
		return row, nil, deny(http.StatusForbidden, errors.New("pod's cluster not configured"))
	}
	if !slices.Contains(pc.verifiedBy, cl.Name) {
		metrics.IngestPrecheckRejects.WithLabelValues("cluster").Inc()
		h.logRefusal("token not signed by the pod's cluster", tokenID, "pod", pod, "cluster", cl.Name, "signedBy", pc.verifiedBy)
		return row, nil, deny(http.StatusUnauthorized, errors.New("token signed by another cluster"))
	}
	if err := h.refuseClosed(row); err != nil {
		return row, nil, err
	}
	return row, cl, nil
}

// errUnbound: the token is the pod's, but the row has no pod uid yet to
// bind it to (503, retried; never cached).
var errUnbound = errors.New("work pod's uid not recorded yet")

// refusals are the answers to the verdicts other than accepted: the code,
// the cause logged (through logRefusal, once a minute a token) and, for
// forbidden, Info rather than Debug — a token its spoke authenticated as
// another identity is worth an operator's look, once.
var refusals = map[verdict]struct {
	code int
	err  error
	info bool
	log  string
}{
	unauthorized: {http.StatusUnauthorized, errors.New("token not authenticated"), false, "token not authenticated by its cluster"},
	otherIssuer:  {http.StatusUnauthorized, errors.New("token of another issuer"), false, "token of another issuer than its cluster's"},
	forbidden:    {http.StatusForbidden, errors.New("token of another identity"), true, "token authenticated but not for this pod"},
	otherPod:     {http.StatusForbidden, errors.New("token bound to another pod"), false, "token bound to another pod than the row's"},
	unbound:      {http.StatusServiceUnavailable, errUnbound, false, "token of a pod whose uid is not recorded yet"},
}

// refusal is the answer to verdict v for row: nil when accepted.
func (h *Handler) refusal(v verdict, tokenID string, row store.WorkPod) error {
	r, ok := refusals[v]
	if !ok {
		return nil
	}
	level := h.log.Debug
	if r.info {
		level = h.log.Info
	}
	h.logLimited(level, r.log, "token", tokenID, "pod", row.ID, "cluster", row.Cluster, "state", row.State)
	return deny(r.code, r.err)
}

// bearer returns the token of an "Authorization: Bearer <token>" header
// (the scheme is case-insensitive, RFC 9110).
func bearer(header string) (string, bool) {
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

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

	// 3. The pod's row, on a cluster whose keys signed the token.
	row, cl, err := h.podRow(ctx, pod, pc, tokenID)
	if err != nil {
		return row, true, err
	}

	// 4 and 5. The issuer and the bound pod, then the TokenReview, through
	// the caches.
	v, err := h.authenticate(ctx, cl, row, token, hash, pc)
	if err != nil {
		return row, true, unavailable(err)
	}
	return row, true, h.refusal(v, tokenID, row)
}

// podRow reads pod's row and its cluster, which must be one whose keys
// signed the token: its TokenReview is never asked about another cluster's
// token. A row that takes no more uploads is refused before any review.
func (h *Handler) podRow(ctx context.Context, pod string, pc prechecked, tokenID string) (store.WorkPod, *cluster, error) {
	row, err := h.opts.Store.GetWorkPod(ctx, pod)
	if errors.Is(err, store.ErrNotFound) {
		return row, nil, deny(http.StatusForbidden, errors.New("unknown pod"))
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
		h.log.Debug("token not signed by the pod's cluster", "token", tokenID, "pod", pod, "cluster", cl.Name, "signedBy", pc.verifiedBy)
		return row, nil, deny(http.StatusUnauthorized, errors.New("token signed by another cluster"))
	}
	if err := h.refuseClosed(row); err != nil {
		return row, nil, err
	}
	return row, cl, nil
}

// refusal is the answer to verdict v for row: nil when accepted.
func (h *Handler) refusal(v verdict, tokenID string, row store.WorkPod) error {
	switch v {
	case unauthorized:
		h.log.Debug("token not authenticated by its cluster", "token", tokenID, "pod", row.ID, "cluster", row.Cluster)
		return deny(http.StatusUnauthorized, errors.New("token not authenticated"))
	case otherIssuer:
		h.log.Debug("token of another issuer than its cluster's", "token", tokenID, "pod", row.ID, "cluster", row.Cluster)
		return deny(http.StatusUnauthorized, errors.New("token of another issuer"))
	case forbidden:
		h.log.Info("token authenticated but not for this pod", "token", tokenID, "pod", row.ID, "cluster", row.Cluster)
		return deny(http.StatusForbidden, errors.New("token of another identity"))
	case otherPod:
		h.log.Debug("token bound to another pod than the row's", "token", tokenID, "pod", row.ID, "cluster", row.Cluster)
		return deny(http.StatusForbidden, errors.New("token bound to another pod"))
	case unbound:
		h.log.Debug("token of a pod whose uid is not recorded yet", "token", tokenID, "pod", row.ID, "cluster", row.Cluster, "state", row.State)
		return unavailable(errors.New("work pod's uid not recorded yet"))
	}
	return nil
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

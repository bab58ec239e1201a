package ingest

import (
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

// authorize runs the per-source limit, checks 1–5 and the per-pod limit,
// and returns the pod's row when the request may push for pod.
//
// The source's token is refunded when the request authenticates, so the
// per-source bucket is spent by failed authentication (and outages, which
// cost a TokenReview each); authenticated traffic is bounded per pod
// instead, so pods behind one NAT address do not throttle each other.
func (h *Handler) authorize(r *http.Request, pod string) (store.WorkPod, error) {
	charge, ok, after := h.chargeSource(r)
	if !ok {
		return store.WorkPod{}, rateLimited(after)
	}
	row, err := h.authenticateRequest(r, pod)
	if err != nil {
		return row, err
	}
	charge.refund()
	if ok, after := h.allowPod(row.ID); !ok {
		h.log.Debug("drop-box: pod over its request rate", "pod", row.ID)
		return row, rateLimited(after)
	}
	return row, nil
}

// authenticateRequest runs checks 1–5; every refusal is an *httperr.Error.
func (h *Handler) authenticateRequest(r *http.Request, pod string) (store.WorkPod, error) {
	ctx := r.Context()
	if h.opts.insecureSkipAuth {
		row, err := h.opts.Store.GetWorkPod(ctx, pod)
		if err != nil {
			return row, deny(http.StatusForbidden, err)
		}
		return row, nil
	}
	// 1. A bearer token.
	token, ok := bearer(r.Header.Get("Authorization"))
	if !ok {
		return store.WorkPod{}, deny(http.StatusUnauthorized, errors.New("no bearer token"))
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
			return store.WorkPod{}, deny(http.StatusUnauthorized, err)
		}
		return store.WorkPod{}, unavailable(err)
	}

	// 3. The pod's row says its cluster, which must be one whose keys
	// signed the token: its TokenReview is never asked about another
	// cluster's token.
	row, err := h.opts.Store.GetWorkPod(ctx, pod)
	if errors.Is(err, store.ErrNotFound) {
		return row, deny(http.StatusForbidden, errors.New("unknown pod"))
	}
	if err != nil {
		return row, unavailable(err)
	}
	cl, ok := h.clusters[row.Cluster]
	if !ok {
		h.log.Warn("drop-box: pod's cluster has no validator", "pod", pod, "cluster", row.Cluster)
		return row, deny(http.StatusForbidden, errors.New("pod's cluster not configured"))
	}
	if !slices.Contains(pc.verifiedBy, cl.Name) {
		metrics.IngestPrecheckRejects.WithLabelValues("cluster").Inc()
		h.log.Debug("token not signed by the pod's cluster", "token", tokenID, "pod", pod, "cluster", cl.Name, "signedBy", pc.verifiedBy)
		return row, deny(http.StatusUnauthorized, errors.New("token signed by another cluster"))
	}
	// A row that takes no more uploads is refused before any TokenReview.
	if err := h.refuseClosed(row); err != nil {
		return row, err
	}

	// 4 and 5. The TokenReview, through the caches.
	v, err := h.authenticate(ctx, cl, row, token, hash, pc.exp)
	switch {
	case err != nil:
		return row, unavailable(err)
	case v == unauthorized:
		h.log.Debug("token not authenticated by its cluster", "token", tokenID, "pod", pod, "cluster", cl.Name)
		return row, deny(http.StatusUnauthorized, errors.New("token review: not authenticated"))
	case v == forbidden:
		h.log.Info("token authenticated but not for this pod", "token", tokenID, "pod", pod, "cluster", cl.Name)
		return row, deny(http.StatusForbidden, errors.New("token review: another identity"))
	case v == unbound:
		h.log.Debug("token of a pod whose uid is not recorded yet", "token", tokenID, "pod", pod, "cluster", cl.Name, "state", row.State)
		return row, unavailable(errors.New("work pod's uid not recorded yet"))
	}
	return row, nil
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

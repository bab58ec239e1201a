package ingest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"

	"crucible.dev/crucible/internal/artifact"
	"crucible.dev/crucible/internal/metrics"
	"crucible.dev/crucible/internal/store"
)

// retryAfterUnavailable is the Retry-After of a 503.
const retryAfterUnavailable = "5"

// response is what the client sees; err and the log fields are what is
// logged (never shown to the client).
type response struct {
	code       int
	outcome    string // metric label
	body       any
	retryAfter string
	closeConn  bool // the body was not read to its end (a body timeout)
	err        error
}

// The fixed answers. Every 401 is byte for byte the same, and so is every
// 403: an outsider cannot tell an unknown pod from a known one.
var (
	bodyUnauthorized = map[string]string{"error": "unauthorized"}
	bodyForbidden    = map[string]string{"error": "forbidden"}
	bodyUnavailable  = map[string]string{"error": "temporarily unavailable, retry later"}
)

func deny(code int, err error) response {
	switch code {
	case http.StatusUnauthorized:
		return response{code: code, outcome: "unauthorized", body: bodyUnauthorized, err: err}
	case http.StatusForbidden:
		return response{code: code, outcome: "forbidden", body: bodyForbidden, err: err}
	}
	return unavailable(err)
}

func unavailable(err error) response {
	return response{code: http.StatusServiceUnavailable, outcome: "unavailable", body: bodyUnavailable, retryAfter: retryAfterUnavailable, err: err}
}

func badRequest(code int, msg string) response {
	return response{code: code, outcome: "bad_request", body: map[string]string{"error": msg}}
}

// uploaded is the body of 201 and 200.
type uploaded struct {
	Pod    string `json:"pod"`
	Kind   string `json:"kind"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// ServeHTTP answers POST /api/pods/{pod}/artifacts/{kind}.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	res := h.serve(http.NewResponseController(w), r)
	metrics.IngestRequests.WithLabelValues(res.outcome).Inc()
	if res.err != nil {
		level := h.log.Debug
		if res.code >= 500 {
			level = h.log.Warn
		}
		level("drop-box request refused", "status", res.code, "outcome", res.outcome, "remote", r.RemoteAddr, "error", res.err)
	}
	hdr := w.Header()
	hdr.Set("Content-Type", "application/json")
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Content-Type-Options", "nosniff")
	switch res.code {
	case http.StatusMethodNotAllowed:
		hdr.Set("Allow", http.MethodPost)
	case http.StatusUnauthorized:
		hdr.Set("WWW-Authenticate", "Bearer")
	}
	if res.retryAfter != "" {
		hdr.Set("Retry-After", res.retryAfter)
	}
	if res.closeConn {
		hdr.Set("Connection", "close")
	}
	w.WriteHeader(res.code)
	_ = json.NewEncoder(w).Encode(res.body)
}

// serve runs the checks in their fixed order; the body is read only once
// the token is accepted. rc paces the body (save.go).
func (h *Handler) serve(rc *http.ResponseController, r *http.Request) response {
	if r.Method != http.MethodPost {
		return badRequest(http.StatusMethodNotAllowed, "method not allowed")
	}
	pod, kind, found, valid := parsePath(r.URL)
	if !found {
		return badRequest(http.StatusNotFound, "not found")
	}
	if !valid {
		return badRequest(http.StatusBadRequest, "pod and kind must be DNS-1123 labels")
	}
	if ok, after := h.allow(h.clientAddr(r)); !ok {
		return response{code: http.StatusTooManyRequests, outcome: "rate_limited", body: map[string]string{"error": "too many requests"}, retryAfter: after}
	}
	if res, refused := refuseReserved(kind); refused {
		return res
	}

	row, res, ok := h.authorize(r, pod)
	if !ok {
		return res
	}
	return h.save(rc, r, row, kind)
}

// parsePath splits /api/pods/{pod}/artifacts/{kind}. found is false when the
// path has another shape; valid is false when a segment does not unescape
// to a DNS-1123 label (which rules out "..", "/" and "%2F", upper case and
// control characters).
func parsePath(u *url.URL) (pod, kind string, found, valid bool) {
	parts := strings.Split(u.EscapedPath(), "/")
	if len(parts) != 6 || parts[0] != "" || parts[1] != "api" || parts[2] != "pods" || parts[4] != "artifacts" {
		return "", "", false, false
	}
	pod, err1 := url.PathUnescape(parts[3])
	kind, err2 := url.PathUnescape(parts[5])
	if err1 != nil || err2 != nil || !artifact.ValidName(pod) || !artifact.ValidName(kind) {
		return "", "", true, false
	}
	return pod, kind, true, true
}

// authorize runs checks 1–5 and returns the pod's row when the request may
// push for pod.
func (h *Handler) authorize(r *http.Request, pod string) (store.WorkPod, response, bool) {
	ctx := r.Context()
	if h.opts.insecureSkipAuth {
		row, err := h.opts.Store.GetWorkPod(ctx, pod)
		if err != nil {
			return row, deny(http.StatusForbidden, err), false
		}
		return row, response{}, true
	}
	// 1. A bearer token.
	token, ok := bearer(r.Header.Get("Authorization"))
	if !ok {
		return store.WorkPod{}, deny(http.StatusUnauthorized, errors.New("no bearer token")), false
	}
	sum := sha256.Sum256([]byte(token))
	hash := hex.EncodeToString(sum[:])
	tokenID := hash[:12] // identifies the token in logs; the token itself is never logged

	// 2. The local pre-check.
	c, err := h.precheck(ctx, token)
	if err != nil {
		var rej *rejectError
		if errors.As(err, &rej) {
			metrics.IngestPrecheckRejects.WithLabelValues(rej.reason).Inc()
			h.log.Debug("token refused by pre-check", "token", tokenID, "reason", rej.reason)
			return store.WorkPod{}, deny(http.StatusUnauthorized, err), false
		}
		return store.WorkPod{}, unavailable(err), false
	}

	// 3. The pod's row says its cluster.
	row, err := h.opts.Store.GetWorkPod(ctx, pod)
	if errors.Is(err, store.ErrNotFound) {
		return row, deny(http.StatusForbidden, errors.New("unknown pod")), false
	}
	if err != nil {
		return row, unavailable(err), false
	}
	cl, ok := h.clusters[row.Cluster]
	if !ok {
		h.log.Warn("drop-box: pod's cluster has no validator", "pod", pod, "cluster", row.Cluster)
		return row, deny(http.StatusForbidden, errors.New("pod's cluster not configured")), false
	}
	// A row that takes no more uploads is refused before any TokenReview
	// (save.go; keep this between steps 3 and 4).
	if res, closed := h.refuseClosed(row); closed {
		return row, res, false
	}

	// 4 and 5. The TokenReview, through the caches.
	v, err := h.authenticate(ctx, cl, row, token, hash, c.exp)
	switch {
	case err != nil:
		return row, unavailable(err), false
	case v == unauthorized:
		h.log.Debug("token not authenticated by its cluster", "token", tokenID, "pod", pod, "cluster", cl.Name)
		return row, deny(http.StatusUnauthorized, errors.New("token review: not authenticated")), false
	case v == forbidden:
		h.log.Info("token authenticated but not for this pod", "token", tokenID, "pod", pod, "cluster", cl.Name)
		return row, deny(http.StatusForbidden, errors.New("token review: another identity")), false
	}
	return row, response{}, true
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

package ingest

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"

	"crucible.dev/crucible/internal/artifact"
	"crucible.dev/crucible/internal/metrics"
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

package ingest

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"

	"crucible.dev/crucible/internal/artifact"
	"crucible.dev/crucible/internal/httperr"
	"crucible.dev/crucible/internal/metrics"
)

// retryAfterUnavailable is the Retry-After of a 503.
const retryAfterUnavailable = "5"

// response is one answer: a success (code and body) or a refusal (fail:
// status, public message, headers, and the cause that is logged, never
// shown to the client).
type response struct {
	outcome   string // metric label
	code      int    // a success's status
	body      any    // a success's body
	fail      *httperr.Error
	closeConn bool // the body was not read to its end (a body timeout)
}

// The fixed public messages. Every 401 is byte for byte the same, and so is
// every 403: an outsider cannot tell an unknown pod from a known one.
const (
	msgUnauthorized = "unauthorized"
	msgForbidden    = "forbidden"
	msgUnavailable  = "temporarily unavailable, retry later"
)

// refuse is a refusal with a public message and no cause to log.
func refuse(code int, outcome, msg string) response {
	return response{outcome: outcome, fail: httperr.New(code, msg)}
}

// deny is a 401 or 403 with the fixed message, err only logged; any other
// code is unavailable.
func deny(code int, err error) response {
	switch code {
	case http.StatusUnauthorized:
		return response{outcome: "unauthorized", fail: httperr.Wrap(code, msgUnauthorized, err).With("WWW-Authenticate", "Bearer")}
	case http.StatusForbidden:
		return response{outcome: "forbidden", fail: httperr.Wrap(code, msgForbidden, err)}
	}
	return unavailable(err)
}

func unavailable(err error) response {
	return response{outcome: "unavailable",
		fail: httperr.Wrap(http.StatusServiceUnavailable, msgUnavailable, err).With("Retry-After", retryAfterUnavailable)}
}

func badRequest(code int, msg string) response {
	res := refuse(code, "bad_request", msg)
	if code == http.StatusMethodNotAllowed {
		res.fail = res.fail.With("Allow", http.MethodPost)
	}
	return res
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
	hdr := w.Header()
	hdr.Set("Cache-Control", "no-store")
	if res.closeConn {
		hdr.Set("Connection", "close")
	}
	if res.fail != nil {
		if res.fail.Err != nil {
			level := h.log.Debug
			if res.fail.Code >= 500 {
				level = h.log.Warn
			}
			level("drop-box request refused", "status", res.fail.Code, "outcome", res.outcome, "remote", r.RemoteAddr, "error", res.fail.Err)
		}
		httperr.Write(w, r, res.fail, httperr.CompactJSON)
		return
	}
	hdr.Set("Content-Type", "application/json")
	hdr.Set("X-Content-Type-Options", "nosniff")
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

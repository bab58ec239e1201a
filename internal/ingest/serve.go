package ingest

import (
	"net/http"
	"net/url"
	"strings"

	"crucible.dev/crucible/internal/artifact"
	"crucible.dev/crucible/internal/httperr"
	"crucible.dev/crucible/internal/metrics"
)

// retryAfterUnavailable is the Retry-After of a 503.
const retryAfterUnavailable = "5"

// The fixed public messages. Every 401 is byte for byte the same, and so is
// every 403: an outsider cannot tell an unknown pod from a known one.
const (
	msgUnauthorized = "unauthorized"
	msgForbidden    = "forbidden"
	msgUnavailable  = "temporarily unavailable, retry later"
)

// refuse is a refusal with a public message and no cause to log; outcome
// is its label in crucible_ingest_requests_total.
func refuse(code int, outcome, msg string) *httperr.Error {
	return httperr.New(code, msg).Labeled(outcome)
}

// deny is a 401 or 403 with the fixed message, err only logged; any other
// code is unavailable. The edge adds a 401's WWW-Authenticate.
func deny(code int, err error) *httperr.Error {
	switch code {
	case http.StatusUnauthorized:
		return httperr.Wrap(code, msgUnauthorized, err).Labeled("unauthorized")
	case http.StatusForbidden:
		return httperr.Wrap(code, msgForbidden, err).Labeled("forbidden")
	}
	return unavailable(err)
}

// unavailable is a 503 with the fixed message, err only logged; the edge
// adds its Retry-After.
func unavailable(err error) *httperr.Error {
	return httperr.Wrap(http.StatusServiceUnavailable, msgUnavailable, err).Labeled("unavailable")
}

func badRequest(code int, msg string) *httperr.Error {
	he := refuse(code, "bad_request", msg)
	if code == http.StatusMethodNotAllowed {
		he = he.With("Allow", http.MethodPost)
	}
	return he
}

// uploaded is the body of 201 and 200.
type uploaded struct {
	Pod    string `json:"pod"`
	Kind   string `json:"kind"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// stored is an accepted upload: 201 when this request recorded it, 200
// when the same bytes were recorded before.
type stored struct {
	art     uploaded
	created bool
}

// ServeHTTP answers POST /api/pods/{pod}/artifacts/{kind}.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.edge().Serve(w, r, h.serve)
}

// edge answers in compact JSON. An error no check classified is a storage
// error, so unavailable. Anyone can make the drop-box refuse, so a
// refusal's cause is logged at Debug, once a minute per source and
// outcome, and only a failure's (5xx) at Warn, each time.
// Every answer is counted by its outcome.
func (h *Handler) edge() httperr.Edge {
	return httperr.Edge{
		Format:     httperr.CompactJSON,
		Classify:   unavailable,
		RetryAfter: retryAfterUnavailable,
		Challenge:  "Bearer",
		Log: func(r *http.Request, he *httperr.Error, _ error) {
			if he.Err == nil {
				return
			}
			if he.Code >= 500 {
				h.log.Warn("drop-box request failed", "status", he.Code, "outcome", he.Outcome, "remote", r.RemoteAddr, "error", he.Err)
				return
			}
			h.logLimited(h.log.Debug, "drop-box request refused", "source", h.sourceKey(r)+" "+he.Outcome, "status", he.Code, "error", he.Err)
		},
		Done: func(_ *http.Request, code int, he *httperr.Error) {
			metrics.IngestRequests.WithLabelValues(outcome(code, he)).Inc()
		},
	}
}

// outcome is an answer's label in crucible_ingest_requests_total.
func outcome(code int, he *httperr.Error) string {
	switch {
	case he != nil:
		return he.Outcome
	case code == http.StatusCreated:
		return "created"
	}
	return "duplicate"
}

// serve runs the checks in their fixed order; the body is read only once
// the token is accepted, and paced through the connection (save.go). No
// answer is cached.
func (h *Handler) serve(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Cache-Control", "no-store")
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
	if err := refuseReserved(kind); err != nil {
		return err
	}
	row, err := h.authorize(r, pod)
	if err != nil {
		return err
	}
	st, err := h.save(http.NewResponseController(w), r, row, kind)
	if err != nil {
		return err
	}
	code := http.StatusOK
	if st.created {
		code = http.StatusCreated
	}
	return httperr.WriteJSON(w, r, code, st.art, httperr.CompactJSON)
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

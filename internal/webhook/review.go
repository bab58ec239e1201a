package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	authv1 "k8s.io/api/authentication/v1"

	"crucible.dev/crucible/internal/httperr"
)

// maxRequestBytes bounds a TokenReview request; a real one is the token
// (itself capped at jwt.MaxTokenBytes) plus a few hundred bytes.
const maxRequestBytes = 64 << 10

const kindTokenReview = "TokenReview"

// Accepted apiVersions (--authentication-token-webhook-version); v1 and
// v1beta1 JSON have the same shape, and the answer carries the request's.
const (
	reviewV1      = "authentication.k8s.io/v1"
	reviewV1beta1 = "authentication.k8s.io/v1beta1"
)

// reviewRequest is the part of a TokenReview the webhook reads; the rest
// (metadata, spec.audiences) is ignored, as encoding/json ignored it in
// authv1.TokenReview. A small struct decodes with a fraction of the
// allocations of the whole API type.
type reviewRequest struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Spec       struct {
		Token string `json:"token"`
	} `json:"spec"`
}

// bufPool holds request and answer buffers; a review's are about 1.5 KiB.
var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledBuffer keeps buffers grown by odd requests out of the pool.
const maxPooledBuffer = 16 << 10

func putBuf(b *bytes.Buffer) {
	if b.Cap() <= maxPooledBuffer {
		b.Reset()
		bufPool.Put(b)
	}
}

// reviewEdge answers a request that is no TokenReview in plain text, which
// is what kube-apiserver reads from a refusing webhook. Anyone who can reach
// the API server can send requests here, so each refusal is a Debug line
// within the refusal summary (refusals), never an Info line of its own.
func (s *Server) reviewEdge() httperr.Edge {
	return httperr.Edge{
		Format: httperr.Text,
		Log: func(r *http.Request, he *httperr.Error, _ error) {
			s.refusals.note(r.Context(), s.log, refusedRequest, "refused TokenReview request", "status", he.Code, "reason", he.Msg, "error", he.Err)
		},
	}
}

// serveReview answers one TokenReview. Its hot path is the signature check:
// the request decodes into a small struct from a pooled buffer, the answer
// is written from pre-encoded pieces, metrics are resolved per provider
// ahead of time, and a review is logged only when Debug is on.
func (s *Server) serveReview(w http.ResponseWriter, r *http.Request) error {
	buf := bufPool.Get().(*bytes.Buffer)
	defer putBuf(buf)
	req, err := decodeReview(w, r, buf)
	if err != nil {
		return err
	}
	start := time.Now()
	snap := s.current.Load()
	out := snap.review(r.Context(), req.Spec.Token)
	snap.observe(out, time.Since(start))
	// Acceptances are the bulk of the traffic and refusals are what a flood
	// of forged tokens produces: both are logged per review at Debug only
	// (refusals summed up at Info).
	if out.result != resultAuthenticated {
		s.refusals.note(r.Context(), s.log, out.result, "token review", "provider", out.provider, "result", out.result, "reason", out.reason)
	} else if s.log.Enabled(r.Context(), slog.LevelDebug) {
		s.log.Log(r.Context(), slog.LevelDebug, "token review", "provider", out.provider, "result", out.result, "reason", out.reason)
	}
	buf.Reset()
	writeAnswer(w, r, buf, req.APIVersion, out.status)
	return nil
}

// decodeReview reads a TokenReview request into buf and refuses anything
// that is not one with an *httperr.Error; no answer is written here.
func decodeReview(w http.ResponseWriter, r *http.Request, buf *bytes.Buffer) (*reviewRequest, error) {
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, maxRequestBytes))
	if maxErr := (*http.MaxBytesError)(nil); errors.As(err, &maxErr) {
		return nil, httperr.Wrap(http.StatusRequestEntityTooLarge, "request body larger than 64 KiB", err)
	} else if err != nil {
		return nil, httperr.Wrap(http.StatusBadRequest, "cannot read request body", err)
	}
	var req reviewRequest
	if err := json.Unmarshal(buf.Bytes(), &req); err != nil {
		return nil, httperr.Wrap(http.StatusBadRequest, "request body is not a TokenReview JSON document", err)
	}
	if req.Kind != kindTokenReview {
		return nil, httperr.New(http.StatusBadRequest, "kind must be TokenReview")
	}
	if req.APIVersion != reviewV1 && req.APIVersion != reviewV1beta1 {
		return nil, httperr.New(http.StatusBadRequest, "apiVersion must be authentication.k8s.io/v1 or authentication.k8s.io/v1beta1")
	}
	if req.Spec.Token == "" {
		return nil, httperr.New(http.StatusBadRequest, "spec.token is empty")
	}
	return &req, nil
}

// encodeStatus is the answer's status, encoded once per outcome (a cached
// acceptance is answered from it). It leaves status.audiences empty so
// kube-apiserver applies its own --api-audiences, and never holds the token.
func encodeStatus(out outcome) []byte {
	var status authv1.TokenReviewStatus
	switch out.result {
	case resultAuthenticated:
		status = authv1.TokenReviewStatus{Authenticated: true, User: out.user}
	case resultError:
		status = authv1.TokenReviewStatus{Error: out.err}
	}
	data, err := json.Marshal(status)
	if err != nil { // strings, slices and maps of strings always encode
		return []byte(`{}`)
	}
	return data
}

// writeAnswer writes the TokenReview answer in the request's apiVersion
// around an encoded status; it never echoes the spec (the token).
func writeAnswer(w http.ResponseWriter, r *http.Request, buf *bytes.Buffer, apiVersion string, status []byte) {
	buf.WriteString(`{"kind":"TokenReview","apiVersion":"`)
	buf.WriteString(apiVersion) // one of two constants, nothing to escape
	buf.WriteString(`","metadata":{},"spec":{},"status":`)
	buf.Write(status)
	buf.WriteString("}\n")
	httperr.WriteBody(w, r, http.StatusOK, "application/json", buf.Bytes())
}

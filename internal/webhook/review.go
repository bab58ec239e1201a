package webhook

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"time"

	authv1 "k8s.io/api/authentication/v1"

	"crucible.dev/crucible/internal/metrics"
)

// maxRequestBytes bounds a TokenReview request; a real one is the token
// (itself capped at jwt.MaxTokenBytes) plus a few hundred bytes.
const maxRequestBytes = 64 << 10

const kindTokenReview = "TokenReview"

// reviewVersions are the apiVersions kube-apiserver sends
// (--authentication-token-webhook-version); v1 and v1beta1 JSON have the same
// shape, and the answer carries the request's.
var reviewVersions = map[string]bool{
	"authentication.k8s.io/v1":      true,
	"authentication.k8s.io/v1beta1": true,
}

// httpError is a refused request: Msg is what the client sees, Err what is
// logged.
type httpError struct {
	Code int
	Msg  string
	Err  error
}

func (s *Server) serveReview(w http.ResponseWriter, r *http.Request) {
	req, herr := decodeReview(w, r)
	if herr != nil {
		s.refusals.note(r.Context(), s.log, refusedRequest, "refused TokenReview request", "status", herr.Code, "reason", herr.Msg, "error", herr.Err)
		http.Error(w, herr.Msg, herr.Code)
		return
	}
	start := time.Now()
	out := s.current.Load().authenticate(r.Context(), req.Spec.Token)
	answer := answerFor(req.APIVersion, out)

	metrics.WebhookReviews.WithLabelValues(out.provider, out.result).Inc()
	metrics.WebhookReviewDuration.WithLabelValues(out.result).Observe(time.Since(start).Seconds())
	// Every review is counted in metrics. Acceptances are the bulk of the
	// traffic and refusals are what a flood of forged tokens produces: both
	// are logged per review at Debug only (refusals summed up at Info).
	if out.result == resultAuthenticated {
		s.log.Log(r.Context(), slog.LevelDebug, "token review", "provider", out.provider, "result", out.result, "reason", out.reason)
	} else {
		s.refusals.note(r.Context(), s.log, out.result, "token review", "provider", out.provider, "result", out.result, "reason", out.reason)
	}
	writeJSON(w, http.StatusOK, answer)
}

// decodeReview reads a TokenReview request and refuses anything that is not
// one; no answer is written here.
func decodeReview(w http.ResponseWriter, r *http.Request) (*authv1.TokenReview, *httpError) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBytes))
	if maxErr := (*http.MaxBytesError)(nil); errors.As(err, &maxErr) {
		return nil, &httpError{http.StatusRequestEntityTooLarge, "request body larger than 64 KiB", err}
	} else if err != nil {
		return nil, &httpError{http.StatusBadRequest, "cannot read request body", err}
	}
	var req authv1.TokenReview
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, &httpError{http.StatusBadRequest, "request body is not a TokenReview JSON document", err}
	}
	if req.Kind != kindTokenReview {
		return nil, &httpError{http.StatusBadRequest, "kind must be TokenReview", nil}
	}
	if !reviewVersions[req.APIVersion] {
		return nil, &httpError{http.StatusBadRequest, "apiVersion must be authentication.k8s.io/v1 or authentication.k8s.io/v1beta1", nil}
	}
	if req.Spec.Token == "" {
		return nil, &httpError{http.StatusBadRequest, "spec.token is empty", nil}
	}
	return &req, nil
}

// answerFor is the TokenReview answer in the request's apiVersion. It never
// echoes the spec (the token), and leaves status.audiences empty so
// kube-apiserver applies its own --api-audiences.
func answerFor(apiVersion string, out outcome) *authv1.TokenReview {
	answer := &authv1.TokenReview{}
	answer.APIVersion = apiVersion
	answer.Kind = kindTokenReview
	switch out.result {
	case resultAuthenticated:
		answer.Status = authv1.TokenReviewStatus{Authenticated: true, User: out.user}
	case resultError:
		answer.Status = authv1.TokenReviewStatus{Error: out.err}
	}
	return answer
}

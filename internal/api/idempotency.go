package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/httperr"
	"crucible.dev/crucible/internal/store"
	"crucible.dev/crucible/internal/workpod"
)

// idempotencyKey returns the request's key, "" when it has none. A key
// that is malformed or sent more than once is a 400 naming the header,
// never silently ignored: a client that sends a key relies on it.
func idempotencyKey(r *http.Request) (string, error) {
	vs := r.Header.Values(apiv1.IdempotencyKeyHeader)
	var err error
	switch {
	case len(vs) == 0:
		return "", nil
	case len(vs) > 1:
		err = fmt.Errorf("sent %d times; send one key", len(vs))
	default:
		err = apiv1.CheckIdempotencyKey(vs[0])
	}
	if err != nil {
		return "", &httperr.Error{Code: http.StatusBadRequest, Field: apiv1.IdempotencyKeyHeader, Msg: apiv1.IdempotencyKeyHeader + ": " + err.Error()}
	}
	return vs[0], nil
}

// requestJSON is req's canonical JSON (struct field order, map keys
// sorted), what its digest is of, so a retry that encodes the same request
// with other spacing or key order is the same request. req has its
// defaults applied (kind, cluster) so that leaving one out and spelling it
// match. The digest is keyed (workpod.Digest): the request carries the
// secret files' values.
func requestJSON(req apiv1.SubmitRequest) ([]byte, error) {
	data, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	return data, nil
}

// digestKey is the store's digest key, read on the first submit that needs
// it and kept: it never changes.
func (s *Server) digestKey(ctx context.Context) ([]byte, error) {
	s.digestMu.Lock()
	defer s.digestMu.Unlock()
	if s.digest == nil {
		key, err := s.Store.DigestKey(ctx)
		if err != nil {
			return nil, fmt.Errorf("read the digest key: %w", err)
		}
		s.digest = key
	}
	return s.digest, nil
}

// replaySubmit answers a submit whose key the submitter used before: the row that
// request made, as it is now — pending while that request's dispatch is
// still in flight, else whatever became of it — with the status and body
// shape of a first answer. A row that request persisted and never
// dispatched (the controller stopped between the two) is dispatched by the
// replay once that dispatch's time is over: the replay carries the secret
// files the store does not keep, so it is the one way such a row with them
// runs (the startup reconcile dispatches one without). The same key with
// another request is refused: answering that row would tell the client its
// new request ran.
func (s *Server) replaySubmit(w http.ResponseWriter, r *http.Request, key string, req apiv1.SubmitRequest, sub submission) error {
	p, err := s.Store.GetWorkPodByKey(r.Context(), identity(r).User, key)
	if err != nil {
		return fmt.Errorf("read the row of an idempotency key: %w", err)
	}
	if !workpod.DigestMatches(sub.digestKey, sub.request, p.RequestSHA256) {
		return &httperr.Error{Code: http.StatusUnprocessableEntity, Field: apiv1.IdempotencyKeyHeader,
			Msg: fmt.Sprintf("%s was used for work pod %s with a different request; repeat that request, or use a new key for a new one",
				apiv1.IdempotencyKeyHeader, p.ID)}
	}
	s.Log.Info("submit replayed", "pod", p.ID, "state", p.State, "user", identity(r).User)
	if p.State == store.StatePending && p.PodUID == "" && time.Since(p.CreatedAt) >= s.DispatchTimeout {
		// To the row's cluster, which a placed request chose then.
		req.Cluster, req.Clusters, req.Placement = p.Cluster, nil, ""
		sub, err := newSubmission(s.profile(), req, identity(r), key, sub.digestKey, func(string) string { return p.ID })
		if err != nil {
			return err
		}
		sub.row = p
		if p, err = s.dispatchAndRecord(r.Context(), sub); err != nil {
			return err
		}
		s.Log.Info("replay dispatched a row its first submit never dispatched", "pod", p.ID, "user", identity(r).User)
	}
	w.Header().Set(apiv1.ReplayedHeader, "true")
	writeJSON(w, http.StatusCreated, view(p))
	return nil
}

package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"crucible.dev/crucible/internal/httperr"
	"crucible.dev/crucible/internal/store"
	"crucible.dev/crucible/internal/workpod"
)

// Idempotent submits (the Idempotency-Key header of Stripe's API and of the
// IETF httpapi draft). A client that sent POST /api/pods and heard nothing
// back — the controller was killed, a proxy cut the connection — cannot
// tell whether a row was made. Sent again with the same key, the request
// answers the row the first one made (and dispatches nothing) instead of
// running the work twice as two rows.
const (
	// IdempotencyKeyHeader is the optional request header of POST /api/pods.
	IdempotencyKeyHeader = "Idempotency-Key"
	// ReplayedHeader is "true" on an answer that is the row an earlier
	// request with the same key made.
	ReplayedHeader = "Idempotent-Replayed"
	// MaxIdempotencyKeyBytes bounds a key (Stripe's bound): room for a
	// UUID or a client's own composite key, not for a payload.
	MaxIdempotencyKeyBytes = 255
)

// CheckIdempotencyKey says what is wrong with key as an Idempotency-Key:
// a key is printable ASCII (space to tilde), 1 to MaxIdempotencyKeyBytes
// bytes. The CLI checks --idempotency-key with it before sending.
func CheckIdempotencyKey(key string) error {
	switch {
	case key == "":
		return errors.New("empty; send a key or no header")
	case len(key) > MaxIdempotencyKeyBytes:
		return fmt.Errorf("%d bytes; at most %d", len(key), MaxIdempotencyKeyBytes)
	}
	for i := range len(key) {
		if c := key[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("byte %d is not printable ASCII", i)
		}
	}
	return nil
}

// idempotencyKey returns the request's key, "" when it has none. A key
// that is malformed or sent more than once is a 400 naming the header,
// never silently ignored: a client that sends a key relies on it.
func idempotencyKey(r *http.Request) (string, error) {
	vs := r.Header.Values(IdempotencyKeyHeader)
	var err error
	switch {
	case len(vs) == 0:
		return "", nil
	case len(vs) > 1:
		err = fmt.Errorf("sent %d times; send one key", len(vs))
	default:
		err = CheckIdempotencyKey(vs[0])
	}
	if err != nil {
		return "", &httperr.Error{Code: http.StatusBadRequest, Field: IdempotencyKeyHeader, Msg: IdempotencyKeyHeader + ": " + err.Error()}
	}
	return vs[0], nil
}

// requestJSON is req's canonical JSON (struct field order, map keys
// sorted), what its digest is of, so a retry that encodes the same request
// with other spacing or key order is the same request. req has its
// defaults applied (kind, cluster) so that leaving one out and spelling it
// match. The digest is keyed (workpod.Digest): the request carries the
// secret files' values.
func requestJSON(req SubmitRequest) ([]byte, error) {
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
func (s *Server) replaySubmit(w http.ResponseWriter, r *http.Request, key string, req SubmitRequest, sub submission) error {
	p, err := s.Store.GetWorkPodByKey(r.Context(), identity(r).User, key)
	if err != nil {
		return fmt.Errorf("read the row of an idempotency key: %w", err)
	}
	if !workpod.DigestMatches(sub.digestKey, sub.request, p.RequestSHA256) {
		return &httperr.Error{Code: http.StatusUnprocessableEntity, Field: IdempotencyKeyHeader,
			Msg: fmt.Sprintf("%s was used for work pod %s with a different request; repeat that request, or use a new key for a new one",
				IdempotencyKeyHeader, p.ID)}
	}
	s.Log.Info("submit replayed", "pod", p.ID, "state", p.State, "user", identity(r).User)
	if p.State == store.StatePending && p.PodUID == "" && time.Since(p.CreatedAt) >= s.DispatchTimeout {
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
	w.Header().Set(ReplayedHeader, "true")
	writeJSON(w, http.StatusCreated, view(p))
	return nil
}

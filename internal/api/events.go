package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"crucible.dev/crucible/internal/api/apiv1"
	podevents "crucible.dev/crucible/internal/events"
	"crucible.dev/crucible/internal/httperr"
)

// maxEventIDBytes bounds a Last-Event-ID of GET /api/events; a real one is
// under 40 bytes.
const maxEventIDBytes = 64

// watchEvents streams work-pod changes as SSE (GET /api/events): `event:
// pod` with the row as GET /api/pods shows it and an id to resume from
// (Last-Event-ID); `event: reset` when changes may have been missed (a
// resume from before the history or from another controller process), on
// which a client re-lists; `event: error` before the stream ends because
// the client fell too far behind ([events] queue, queue_bytes) or its
// caller lost its credentials or permission (re-checked every [api]
// stream_recheck). ?cluster= and ?kind= narrow the stream. Streams count
// against [events] max_streams and max_streams_per_identity (429 past
// either). Only this replica's changes are seen (package events).
func (s *Server) watchEvents(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	cluster, kind := q.Get("cluster"), q.Get("kind")
	if cluster != "" {
		if _, ok := s.profile().Cluster(cluster); !ok {
			return &httperr.Error{Code: http.StatusBadRequest, Field: "cluster", Msg: fmt.Sprintf("cluster %q: no such cluster", httperr.Truncate(cluster, 100))}
		}
	}
	if kind != "" && kind != "loop" && kind != "turn" {
		return &httperr.Error{Code: http.StatusBadRequest, Field: "kind", Msg: fmt.Sprintf("kind %q: must be loop or turn", httperr.Truncate(kind, 20))}
	}
	if !acceptsEventStream(r.Header.Values("Accept")) {
		return &httperr.Error{Code: http.StatusNotAcceptable, Msg: "GET /api/events is a stream: send Accept: text/event-stream"}
	}
	last := r.Header.Get("Last-Event-ID")
	if len(last) > maxEventIDBytes {
		return &httperr.Error{Code: http.StatusBadRequest, Field: "Last-Event-ID", Msg: fmt.Sprintf("Last-Event-ID over %d bytes", maxEventIDBytes)}
	}
	caller := callerName(identity(r))
	release, err := s.acquireStream(eventStreams, caller)
	if err != nil {
		return err
	}
	defer release()
	if s.eventsErr != nil {
		return &httperr.Error{Code: http.StatusInternalServerError, Msg: "the event feed is unavailable", Err: s.eventsErr}
	}
	sub, reset := s.Events.Subscribe(last)
	defer sub.Close()

	sse := startSSE(w, "crucible work-pod changes", s.profile().Live.WriteTimeout.Duration) // a watch lasts as long as the client stays
	defer s.cutIfLate(sse, caller)
	if reset {
		sse.event("reset", "", struct{}{})
	}
	ctx, stop := s.watchCaller(r.Context(), r, cluster)
	defer stop()
	s.relayEvents(ctx, sse, sub, caller, cluster, kind)
	endIfCallerGone(ctx, sse)
	return nil
}

// relayEvents writes sub's changes of cluster and kind ("": any) until the
// client leaves, falls too far behind, or ctx ends (its caller lost access:
// watchEvents says so).
func (s *Server) relayEvents(ctx context.Context, sse *sseWriter, sub *podevents.Sub, caller, cluster, kind string) {
	for ctx.Err() == nil {
		if sse.flush() != nil {
			return // the client left
		}
		wctx, cancel := context.WithTimeout(ctx, keepAlive)
		c, err := sub.Next(wctx)
		cancel()
		switch {
		case err == nil:
			if (cluster == "" || c.Pod.Cluster == cluster) && (kind == "" || c.Pod.Kind == kind) {
				sse.event("pod", c.ID, view(c.Pod))
			}
		case ctx.Err() != nil:
			return
		case errors.Is(err, context.DeadlineExceeded):
			sse.comment("keep-alive")
		case errors.Is(err, podevents.ErrOverflow):
			s.refused(budgetEventsQueue, caller)
			sse.event("error", "", apiv1.ErrorEvent{Error: "too far behind; reconnect with Last-Event-ID"})
			_ = sse.flush()
			return
		default:
			return
		}
	}
}

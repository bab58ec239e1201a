package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"

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
// the client fell too far behind. ?cluster= and ?kind= narrow the stream.
// Only this replica's changes are seen (package events).
func (s *Server) watchEvents(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	cluster, kind := q.Get("cluster"), q.Get("kind")
	if cluster != "" {
		if _, ok := s.Profile.Cluster(cluster); !ok {
			return &httperr.Error{Code: http.StatusBadRequest, Field: "cluster", Msg: fmt.Sprintf("cluster %q: no such cluster", truncate(cluster, 100))}
		}
	}
	if kind != "" && kind != "loop" && kind != "turn" {
		return &httperr.Error{Code: http.StatusBadRequest, Field: "kind", Msg: fmt.Sprintf("kind %q: must be loop or turn", truncate(kind, 20))}
	}
	if !acceptsEventStream(r.Header.Values("Accept")) {
		return &httperr.Error{Code: http.StatusNotAcceptable, Msg: "GET /api/events is a stream: send Accept: text/event-stream"}
	}
	last := r.Header.Get("Last-Event-ID")
	if len(last) > maxEventIDBytes {
		return &httperr.Error{Code: http.StatusBadRequest, Field: "Last-Event-ID", Msg: fmt.Sprintf("Last-Event-ID over %d bytes", maxEventIDBytes)}
	}
	sub, reset := s.eventBus().Subscribe(last)
	defer sub.Close()

	sse := startSSE(w, "crucible work-pod changes", s.liveLimits().WriteTimeout.Duration) // a watch lasts as long as the client stays
	caller := callerName(identity(r))
	defer s.cutIfLate(sse, caller)
	if reset {
		sse.event("reset", "", struct{}{})
	}
	ctx := r.Context()
	for {
		if sse.flush() != nil {
			return nil // the client left
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
			return nil
		case errors.Is(err, context.DeadlineExceeded):
			sse.comment("keep-alive")
		case errors.Is(err, podevents.ErrOverflow):
			s.refused(budgetEventsQueue, caller)
			sse.event("error", "", ErrorEvent{Error: "too far behind; reconnect with Last-Event-ID"})
			_ = sse.flush()
			return nil
		default:
			return nil
		}
	}
}

func (s *Server) eventBus() *podevents.Bus {
	s.eventsOnce.Do(func() {
		if s.Events == nil {
			s.Events = podevents.NewBus() // nobody publishes: the stream only keeps alive
		}
	})
	return s.Events
}

package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/artifact"
	"crucible.dev/crucible/internal/dispatch"
	"crucible.dev/crucible/internal/httperr"
	"crucible.dev/crucible/internal/httpserve"
	"crucible.dev/crucible/internal/live"
	"crucible.dev/crucible/internal/render"
	"crucible.dev/crucible/internal/retry"
	"crucible.dev/crucible/internal/store"
)

// Live-view timing.
const (
	// keepAlive is how often an idle stream sends a comment, so proxies and
	// clients see a live connection.
	keepAlive = 15 * time.Second
	// settle bounds waiting, after a pod's log ended, for its pod to say
	// how it ended (Settler), and for a finished pod's log to be collected
	// before it is replayed.
	settle = 30 * time.Second
)

// logs serves GET /api/pods/{pod}/logs (R-C8). With Accept: text/event-stream
// it streams the log as Server-Sent Events: `line` events (id = the line's
// number in the log, from 1, the same live and replayed, so Last-Event-ID
// resumes after that line), then one `end` event, or an `error` event when
// the stream cannot go on (a viewer too slow for its buffer is dropped this
// way and may reconnect with Last-Event-ID). A pending pod's stream waits
// for it to start; a finished pod's replays its stored log. Streams count
// against [live] max_viewers and max_viewers_per_identity (429 past
// either), a client that does not take a write within [live]
// write_timeout is cut, and one whose caller lost its credentials or
// permission (re-checked every [api] stream_recheck) gets an `error` event
// saying so and the stream ends.
//
// Without text/event-stream a finished pod's stored log is returned as
// text/plain (the same bytes as artifacts/log); a live pod's log is only a
// stream, so that is 406.
func (s *Server) logs(w http.ResponseWriter, r *http.Request) error {
	p, err := s.row(r)
	if err != nil {
		return err
	}
	if !acceptsEventStream(r.Header.Values("Accept")) {
		return s.plainLog(w, r, p)
	}
	after, err := lastEventID(r.Header.Get("Last-Event-ID"))
	if err != nil {
		return err
	}
	caller := callerName(identity(r))
	release, err := s.acquireStream(viewerStreams, caller)
	if err != nil {
		return err
	}
	defer release()
	// Headers first: from here on, failures are events. A stream lasts as
	// long as the pod.
	sse := startSSE(w, "crucible live log of "+p.ID, s.profile().Live.WriteTimeout.Duration)
	defer s.cutIfLate(sse, caller)
	ctx, stop := s.watchCaller(r.Context(), r, p.Cluster)
	defer stop()
	if p.State.Terminal() {
		err = s.replay(ctx, sse, p, after)
	} else {
		httpserve.LimitSendBuffer(r, liveSendBuffer(s.profile().Live.ReadBytesPerSecond))
		err = s.stream(ctx, sse, p, after, caller)
	}
	endIfCallerGone(ctx, sse)
	return err
}

// liveSendBuffer is the socket send buffer of a live stream: a quarter of a
// second at [live] read_bytes_per_second (at least 64 KiB), room for a
// viewer taking a pod's lines at the full rate over a 250 ms round trip.
// What a viewer that stops reading leaves unread is then bounded by the
// kernel as its queue is by viewer_buffer_bytes, instead of growing to
// megabytes a connection (httpserve.LimitSendBuffer).
func liveSendBuffer(readRate int64) int {
	return int(min(max(readRate/4, 64<<10), 1<<30))
}

// cutIfLate counts and logs a stream that ended because its client did not
// take a write in time.
func (s *Server) cutIfLate(sse *sseWriter, caller string) {
	if errors.Is(sse.err, os.ErrDeadlineExceeded) {
		s.refused(budgetWriteTimeout, caller)
	}
}

// stream relays the live stream until the pod ends, the stream fails, the
// client leaves or ctx ends (its caller lost access: logs says so).
func (s *Server) stream(ctx context.Context, sse *sseWriter, p store.WorkPod, after int64, caller string) error {
	if s.liveErr != nil {
		s.Log.Error("live log hub unavailable", "error", s.liveErr)
		sse.event("error", "", apiv1.ErrorEvent{Error: "the live log is unavailable"})
		_ = sse.flush()
		return nil
	}
	v := s.Live.Subscribe(live.Key{Cluster: p.Cluster, Namespace: p.Namespace, Pod: p.ID}, after)
	defer v.Close()
	for ctx.Err() == nil { // a pod printing fast keeps TryNext busy: ask here too
		l, ok, err := v.TryNext()
		if ok {
			if sse.line(l); sse.err != nil {
				return nil // the client left or was cut
			}
			continue
		}
		if err == nil {
			if sse.flush() != nil {
				return nil // the client left
			}
			wctx, cancel := context.WithTimeout(ctx, keepAlive)
			l, err = v.Next(wctx)
			cancel()
			switch {
			case err == nil:
				sse.line(l)
				continue
			case ctx.Err() != nil:
				return nil
			case errors.Is(err, context.DeadlineExceeded):
				sse.comment("keep-alive")
				continue
			}
		}
		switch {
		case errors.Is(err, io.EOF):
			s.end(ctx, sse, p)
		case errors.Is(err, live.ErrSlowViewer):
			s.refused(budgetViewerBuffer, caller)
			sse.event("error", "", apiv1.ErrorEvent{Error: live.ErrSlowViewer.Error()}) // the sentinel's public text, never what wraps it
		default:
			s.Log.Warn("live log stream failed", "pod", p.ID, "cluster", p.Cluster, "error", err)
			sse.event("error", "", apiv1.ErrorEvent{Error: "the pod's log stream from " + p.Cluster + " failed: " + dispatch.PublicMessage(err)})
		}
		_ = sse.flush()
		return nil
	}
	return nil
}

// replay streams a finished pod's stored log, then its end.
func (s *Server) replay(ctx context.Context, sse *sseWriter, p store.WorkPod, after int64) error {
	p = s.settled(ctx, p, func(p store.WorkPod) bool {
		return p.LogCollected || p.State == store.StateCancelled || p.State == store.StateLost
	})
	if p.LogCollected {
		f, err := s.openLog(ctx, p.ID)
		if err != nil {
			s.Log.Error("stored log unreadable", "pod", p.ID, "error", err)
			sse.event("error", "", apiv1.ErrorEvent{Error: "the stored log is unreadable"})
			_ = sse.flush()
			return nil
		}
		defer f.Close()
		err = live.ReadLines(f, func(l live.Line) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			if l.N > after {
				sse.line(l)
			}
			return sse.err
		})
		if err != nil {
			return nil // the client left, or its caller lost access
		}
	}
	s.end(ctx, sse, p)
	_ = sse.flush()
	return nil
}

// end sends the end event: how the pod ended. The row is brought up to date
// with the pod on its spoke first (Settler), so the end event, GET
// /api/pods/{pod} and the events stream tell the same story even while the
// pod's watch has not caught up. A pod that is still live after settle (its
// log ended, its container did not) ends the stream with its live state and
// says so; one whose spoke cannot tell ends with an error event, never with
// a guess.
func (s *Server) end(ctx context.Context, sse *sseWriter, row store.WorkPod) {
	var p store.WorkPod
	var err error
	for deadline := time.Now().Add(settle); ; {
		p, err = s.settleOnce(ctx, row.ID)
		done := err == nil && p.State.Terminal() || err != nil && !retry.IsTransient(err)
		if done || ctx.Err() != nil || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	switch {
	case ctx.Err() != nil:
		return // the client left
	case err != nil:
		s.Log.Warn("live log ended; the pod's state could not be read", "pod", row.ID, "cluster", row.Cluster, "error", err)
		sse.event("error", "", apiv1.ErrorEvent{Error: "the log ended; how the pod ended could not be read from " + row.Cluster + ": " + dispatch.PublicMessage(err)})
	case p.State.Live():
		sse.event("end", "", apiv1.EndEvent{State: p.State, Reason: "the log ended, but the pod is still " + string(p.State) + " on " + p.Cluster})
	default:
		sse.event("end", "", apiv1.EndEvent{State: p.State, ExitCode: p.ExitCode, Reason: p.Reason})
	}
}

// settleOnce settles the row of pod id, once at a time per pod: the viewers
// of one stream end together and share one read of the spoke.
func (s *Server) settleOnce(ctx context.Context, id string) (store.WorkPod, error) {
	ch := s.settling.DoChan(id, func() (any, error) {
		// Not the first viewer's context: it may leave while others wait.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settle)
		defer cancel()
		return s.Settler.Settle(sctx, id)
	})
	select {
	case <-ctx.Done():
		return store.WorkPod{}, ctx.Err()
	case r := <-ch:
		p, _ := r.Val.(store.WorkPod)
		return p, r.Err
	}
}

// settled polls the row until done(row) or settle passed, and returns it.
func (s *Server) settled(ctx context.Context, p store.WorkPod, done func(store.WorkPod) bool) store.WorkPod {
	deadline := time.Now().Add(settle)
	for !done(p) && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return p
		case <-time.After(250 * time.Millisecond):
		}
		if q, err := s.Store.GetWorkPod(ctx, p.ID); err == nil {
			p = q
		}
	}
	return p
}

// plainLog answers a request that does not take a stream.
func (s *Server) plainLog(w http.ResponseWriter, r *http.Request, p store.WorkPod) error {
	if p.State.Live() {
		return &httperr.Error{Code: http.StatusNotAcceptable, Msg: fmt.Sprintf("work pod %s is %s: its log is a stream, ask with Accept: text/event-stream (crucible logs -f)", p.ID, p.State)}
	}
	if !p.LogCollected {
		return notFound(fmt.Sprintf("collected log of %s (%s)", p.ID, p.State))
	}
	a, err := s.Store.GetArtifact(r.Context(), p.ID, artifact.LogKind)
	if err != nil {
		return err
	}
	return s.serveStored(w, r, a, "log", http.Header{
		"Content-Type":           {"text/plain; charset=utf-8"},
		"X-Content-Type-Options": {"nosniff"},
	})
}

// acceptsEventStream reports whether an Accept header names
// text/event-stream (with a non-zero q).
func acceptsEventStream(accept []string) bool {
	for _, a := range accept {
		for _, part := range strings.Split(a, ",") {
			mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err != nil || mt != "text/event-stream" {
				continue
			}
			if q, err := strconv.ParseFloat(params["q"], 64); params["q"] != "" && (err != nil || q <= 0) {
				continue
			}
			return true
		}
	}
	return false
}

// lastEventID parses Last-Event-ID: a line number, or empty for the start.
func lastEventID(v string) (int64, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || len(v) > 19 || strings.TrimLeft(v, "0123456789") != "" {
		return 0, &httperr.Error{Code: http.StatusBadRequest, Field: "Last-Event-ID", Msg: fmt.Sprintf("Last-Event-ID %.40q: must be a line number", v)}
	}
	return n, nil
}

// newLiveHub makes the server's default live hub: over the dispatcher's
// spokes with the profile's [live] section.
func (s *Server) newLiveHub() (*live.Hub, error) {
	l := s.profile().Live
	return live.NewHub(func(k live.Key) live.Source { return &podSource{s: s, key: k} }, live.Options{
		Buffer: l.Buffer, BufferBytes: l.ViewerBufferBytes, History: l.History, HistoryBytes: l.HistoryBytes,
		ReadRate: l.ReadBytesPerSecond, Poll: l.PollInterval.Duration, Retry: s.Retry, Render: renderLine, Log: s.Log.With("component", "live"),
	})
}

// podSource reads a work pod's log and status from its spoke.
type podSource struct {
	s   *Server
	key live.Key
}

var _ live.Source = (*podSource)(nil)

func (ps *podSource) Open(ctx context.Context, since time.Time, follow bool) (io.ReadCloser, error) {
	rc, err := ps.s.Dispatcher.FollowLogs(ctx, ps.key.Cluster, ps.key.Namespace, ps.key.Pod, since, follow)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%w: %w", live.ErrGone, err)
	}
	return rc, err
}

// Status reads the pod on its spoke. A pod not found is not started while
// its row is live (not yet created), and finished otherwise (deleted).
func (ps *podSource) Status(ctx context.Context) (live.Status, error) {
	c, ok := ps.s.Clients.Get(ps.key.Cluster)
	if !ok {
		return live.Status{}, fmt.Errorf("cluster %q: no such cluster", ps.key.Cluster)
	}
	pod, err := c.Kube.CoreV1().Pods(ps.key.Namespace).Get(ctx, ps.key.Pod, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		row, rerr := ps.s.Store.GetWorkPod(ctx, ps.key.Pod)
		if rerr != nil {
			return live.Status{}, rerr
		}
		return live.Status{Finished: !row.State.Live()}, nil
	}
	if err != nil {
		return live.Status{}, err
	}
	return containerStatus(pod), nil
}

func containerStatus(pod *corev1.Pod) live.Status {
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return live.Status{Started: true, Finished: true}
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != render.ContainerName {
			continue
		}
		switch {
		case cs.State.Terminated != nil:
			return live.Status{Started: true, Finished: true}
		case cs.State.Running != nil:
			return live.Status{Started: true}
		}
	}
	return live.Status{}
}

// openLog opens the stored log of pod: the file the store's record names.
func (s *Server) openLog(ctx context.Context, pod string) (io.ReadCloser, error) {
	a, err := s.Store.GetArtifact(ctx, pod, artifact.LogKind)
	if err != nil {
		return nil, err
	}
	return s.Artifacts.Open(ctx, pod, artifact.LogKind, a.SHA256)
}

package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"k8s.io/apimachinery/pkg/util/wait"

	"crucible.dev/crucible/internal/apiauth"
	"crucible.dev/crucible/internal/httperr"
	"crucible.dev/crucible/internal/metrics"
	"crucible.dev/crucible/internal/portforward"
	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/store"
)

// Relay bookkeeping.
const (
	// relayChunk is what one read of either side moves at most: one
	// WebSocket message from the pod, one write to it.
	relayChunk = 32 << 10
	// maxCloseReason is what a close frame's reason may hold (125 bytes
	// less the code), less room for truncate's "…".
	maxCloseReason = 120
	// settleTries bounds asking the spoke how a pod is, after its stream
	// ended, before the close frame says why.
	settleTries = 3
)

// Session outcomes, as crucible_portforward_sessions_total labels them.
const (
	outcomeCallerClosed   = "caller_closed"
	outcomePodClosed      = "pod_closed"
	outcomePodEnded       = "pod_ended"
	outcomeIdle           = "idle"
	outcomePermissionGone = "permission_gone"
	outcomeWriteTimeout   = "write_timeout"
	outcomeSpokeFailed    = "spoke_failed"
	outcomeRunLiveOff     = "run_live_changed"
	outcomeMaxSession     = "max_session"
)

// profilePoll is how often a session looks whether a reload swapped the
// profile, so that run_live turned off or a port dropped from
// run_live_ports ends it within about this long.
const profilePoll = time.Second

// session is one relayed connection: the caller's WebSocket and the
// pod's stream on its spoke.
type session struct {
	s      *Server
	r      *http.Request // the upgraded request: its credentials are re-checked
	ws     *websocket.Conn
	up     ForwardSession
	pod    store.WorkPod
	port   int
	caller string
	limits profile.RunLive
	// profile is the profile the session was last checked against
	// (watchProfile).
	profile *profile.Profile

	toPod, fromPod atomic.Int64
	lastActive     atomic.Int64 // UnixNano of the last byte either way
}

// ending is how a session ended: its outcome (the metric's label), the
// close frame's code and reason, and the cause for the log.
type ending struct {
	outcome string
	code    int
	reason  string
	err     error
	// podSide: the pod's stream ended; how the pod is decides the reason.
	podSide bool
}

// run relays until either side ends, the session idles past [run_live]
// idle_timeout, or the caller's permission is gone; then it closes both
// sides with a close frame saying why, logs the session and counts it.
func (ss *session) run(ctx context.Context) {
	start := time.Now()
	ss.touch()
	metrics.PortForwardOpen.Inc()
	defer metrics.PortForwardOpen.Dec()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The caller's access is checked again every [api] stream_recheck, as
	// every stream's (recheck.go), with the session's own conditions; gone,
	// the session ends.
	watched, stopWatch := ss.s.watchCaller(ctx, ss.r, ss.pod.Cluster, ss.checks()...)
	defer stopWatch()
	maxSession := time.NewTimer(ss.maxSession())
	defer maxSession.Stop()
	ends := make(chan ending, 2)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); ends <- ss.fromCaller() }()
	go func() { defer wg.Done(); ends <- ss.toCaller() }()
	var e ending
	select {
	case e = <-ends:
	case <-ss.up.Ended():
		e = ending{outcome: outcomeSpokeFailed, code: websocket.CloseInternalServerErr, podSide: true,
			reason: "the connection to " + ss.pod.Cluster + "'s API server was lost", err: errors.New("spoke connection closed")}
	case <-ss.idle(ctx):
		e = ending{outcome: outcomeIdle, code: websocket.CloseNormalClosure,
			reason: fmt.Sprintf("idle for %s ([run_live] idle_timeout)", ss.limits.IdleTimeout.Duration)}
	case <-maxSession.C:
		e = ending{outcome: outcomeMaxSession, code: websocket.ClosePolicyViolation,
			reason: fmt.Sprintf("open for %s ([run_live] max_session)", ss.maxSession())}
	case gone := <-ss.watchProfile(ctx):
		e = ending{outcome: outcomeRunLiveOff, code: websocket.ClosePolicyViolation, reason: gone.reason}
	case <-watched.Done():
		e = ending{outcome: outcomeCallerClosed, code: websocket.CloseGoingAway, reason: "the controller is stopping"}
		if gone, ok := errors.AsType[*callerGone](context.Cause(watched)); ok {
			e = ending{outcome: outcomePermissionGone, code: websocket.ClosePolicyViolation, reason: gone.reason}
			if gone.runLive {
				e.outcome = outcomeRunLiveOff
			}
		}
	}
	if e.podSide {
		e = ss.podEnding(ctx, e)
	}
	ss.close(e)
	cancel()
	wg.Wait()
	ss.done(e, time.Since(start))
}

// close sends the close frame and closes both sides, which ends both
// copies.
func (ss *session) close(e ending) {
	msg := websocket.FormatCloseMessage(e.code, httperr.Truncate(e.reason, maxCloseReason))
	_ = ss.ws.WriteControl(websocket.CloseMessage, msg, time.Now().Add(ss.writeTimeout())) // a caller that is gone does not read it
	_ = ss.up.Close()
	_ = ss.ws.Close()
}

// done logs the session (never a token: the caller by name) and counts it.
func (ss *session) done(e ending, took time.Duration) {
	metrics.PortForwardSessions.WithLabelValues(ss.pod.Cluster, e.outcome).Inc()
	if e.outcome == outcomeWriteTimeout {
		ss.s.refused(budgetSessionWriteTimeout, ss.caller)
	}
	args := []any{"user", ss.caller, "owner", ss.pod.Submitter, "cluster", ss.pod.Cluster, "pod", ss.pod.ID, "port", ss.port,
		"bytes_to_pod", ss.toPod.Load(), "bytes_from_pod", ss.fromPod.Load(), "duration", took.Round(time.Millisecond),
		"outcome", e.outcome, "reason", e.reason}
	if e.err != nil {
		args = append(args, "error", e.err)
	}
	ss.s.Log.Info("port-forward session ended", args...)
}

// checks are what the session's re-checks ask beyond create on
// workpods/portforward: create-any when the pod is another submitter's,
// and that the cluster still allows the session's port.
func (ss *session) checks() []streamCheck {
	checks := []streamCheck{func(context.Context, *http.Request, apiauth.Identity) *callerGone { return ss.runLiveGone() }}
	if !ownPod(identity(ss.r), ss.pod) {
		a := portForwardAnyAttributes(ss.pod.Cluster)
		checks = append(checks, func(ctx context.Context, r *http.Request, id apiauth.Identity) *callerGone {
			return ss.s.stillAllowed(ctx, r, id, a)
		})
	}
	return checks
}

// runLiveGone is why the profile in force no longer allows the session
// (its cluster's run_live off or gone, its port no longer in
// run_live_ports), naming the key; nil while it does.
func (ss *session) runLiveGone() *callerGone {
	e, key, err := ss.s.runLiveCluster(ss.pod.Cluster)
	switch {
	case err != nil && key == "":
		return &callerGone{runLive: true, reason: fmt.Sprintf("cluster %q is no longer in the controller's profile", ss.pod.Cluster)}
	case err != nil:
		return &callerGone{runLive: true, reason: fmt.Sprintf("cluster %q no longer enables run-live (%s.run_live)", ss.pod.Cluster, key)}
	case !slices.Contains(runLivePorts(e), ss.port):
		return &callerGone{runLive: true, reason: fmt.Sprintf("port %d is no longer in %s.run_live_ports", ss.port, key)}
	}
	return nil
}

// watchProfile delivers, once, why a reloaded profile no longer allows the
// session: every profilePoll it compares the profile in force with the one
// last checked, and checks again when a reload swapped it.
func (ss *session) watchProfile(ctx context.Context) <-chan *callerGone {
	ch := make(chan *callerGone, 1)
	go func() {
		_ = wait.PollUntilContextCancel(ctx, profilePoll, false, func(context.Context) (bool, error) {
			p := ss.s.profile()
			if p == ss.profile {
				return false, nil
			}
			ss.profile = p
			gone := ss.runLiveGone()
			if gone != nil {
				ch <- gone
			}
			return gone != nil, nil
		})
	}()
	return ch
}

// maxSession is how long the session may stay open ([run_live]
// max_session, as the profile said when it opened).
func (ss *session) maxSession() time.Duration {
	if d := ss.limits.MaxSession.Duration; d > 0 {
		return d
	}
	return profile.DefaultRunLiveMaxSession
}

func (ss *session) writeTimeout() time.Duration {
	if d := ss.limits.WriteTimeout.Duration; d > 0 {
		return d
	}
	return profile.DefaultRunLiveWriteTimeout
}

func (ss *session) touch() { ss.lastActive.Store(time.Now().UnixNano()) }

// fromCaller copies the caller's binary messages to the pod. An empty one
// is the caller's half-close: the pod is told nothing more comes.
func (ss *session) fromCaller() ending {
	buf := make([]byte, relayChunk)
	for {
		mt, rd, err := ss.ws.NextReader()
		if err != nil {
			return callerEnding(err)
		}
		if mt != websocket.BinaryMessage {
			return ending{outcome: outcomeCallerClosed, code: websocket.CloseUnsupportedData, reason: "only binary messages carry the stream"}
		}
		n, end := ss.copyToPod(rd, buf)
		if end != nil {
			return *end
		}
		if n == 0 {
			if err := ss.up.CloseWrite(); err != nil {
				return ending{outcome: outcomeSpokeFailed, code: websocket.CloseInternalServerErr, podSide: true, reason: "the pod's stream broke", err: err}
			}
		}
	}
}

// copyToPod writes one message to the pod, a chunk at a time; a non-nil
// ending ends the session.
func (ss *session) copyToPod(rd io.Reader, buf []byte) (int64, *ending) {
	var total int64
	for {
		n, rerr := rd.Read(buf)
		if n > 0 {
			if _, err := ss.up.Write(buf[:n]); err != nil {
				if errors.Is(err, portforward.ErrWriteTimeout) {
					return total, &ending{outcome: outcomeWriteTimeout, code: websocket.CloseTryAgainLater,
						reason: fmt.Sprintf("the pod did not take a write within %s ([run_live] write_timeout)", ss.writeTimeout()), err: err}
				}
				return total, &ending{outcome: outcomeSpokeFailed, code: websocket.CloseInternalServerErr, podSide: true, reason: "the pod's stream broke", err: err}
			}
			total += int64(n)
			ss.toPod.Add(int64(n))
			metrics.PortForwardBytes.WithLabelValues("to_pod").Add(float64(n))
			ss.touch()
		}
		switch {
		case errors.Is(rerr, io.EOF):
			return total, nil
		case rerr != nil:
			e := callerEnding(rerr)
			return total, &e
		}
	}
}

// toCaller copies what the pod sends to the caller, one binary message per
// read, each write bounded by [run_live] write_timeout.
func (ss *session) toCaller() ending {
	buf := make([]byte, relayChunk)
	for {
		n, rerr := ss.up.Read(buf)
		if n > 0 {
			_ = ss.ws.SetWriteDeadline(time.Now().Add(ss.writeTimeout()))
			if err := ss.ws.WriteMessage(websocket.BinaryMessage, buf[:n]); err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					return ending{outcome: outcomeWriteTimeout, code: websocket.CloseTryAgainLater,
						reason: fmt.Sprintf("you did not take a write within %s ([run_live] write_timeout)", ss.writeTimeout()), err: err}
				}
				return callerEnding(err)
			}
			ss.fromPod.Add(int64(n))
			metrics.PortForwardBytes.WithLabelValues("from_pod").Add(float64(n))
			ss.touch()
		}
		switch {
		case errors.Is(rerr, io.EOF):
			return ending{outcome: outcomePodClosed, code: websocket.CloseNormalClosure, podSide: true,
				reason: fmt.Sprintf("work pod %s closed the connection on port %d", ss.pod.ID, ss.port)}
		case rerr != nil:
			return ending{outcome: outcomeSpokeFailed, code: websocket.CloseInternalServerErr, podSide: true,
				reason: "the stream from " + ss.pod.Cluster + " broke", err: rerr}
		}
	}
}

// callerEnding is the caller closing its WebSocket or its connection
// breaking.
func callerEnding(err error) ending {
	if websocket.IsCloseError(err, websocket.CloseNormalClosure, websocket.CloseGoingAway) {
		return ending{outcome: outcomeCallerClosed, code: websocket.CloseNormalClosure, reason: "closed by the caller"}
	}
	return ending{outcome: outcomeCallerClosed, code: websocket.CloseNormalClosure, reason: "the caller's connection ended", err: err}
}

// podEnding refines an ending of the pod's side: a pod that ended says so
// (its row brought up to date with the spoke, as the live log's end does),
// and what the node reported on the error stream is the reason of a
// failure.
func (ss *session) podEnding(ctx context.Context, e ending) ending {
	failure := ss.up.Failure(ctx)
	tries := 1
	if failure != nil || e.outcome != outcomePodClosed {
		tries = settleTries // a broken stream is likelier a pod going away
	}
	for i := 0; i < tries && ctx.Err() == nil; i++ {
		if i > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
		if p, err := ss.s.settleOnce(ctx, ss.pod.ID); err == nil && p.State.Terminal() {
			reason := fmt.Sprintf("work pod %s ended: %s", p.ID, p.State)
			if p.Reason != "" {
				reason += " (" + p.Reason + ")"
			}
			return ending{outcome: outcomePodEnded, code: websocket.CloseGoingAway, reason: reason}
		}
	}
	if failure != nil {
		return ending{outcome: outcomeSpokeFailed, code: websocket.CloseInternalServerErr, err: failure,
			reason: fmt.Sprintf("port %d of work pod %s: %s", ss.port, ss.pod.ID, spokeFailure(failure))}
	}
	return e
}

// spokeFailure is the node's message without the sentinel's prefix.
func spokeFailure(err error) string {
	msg := err.Error()
	if p := portforward.ErrPort.Error() + ": "; len(msg) > len(p) && msg[:len(p)] == p {
		return msg[len(p):]
	}
	return msg
}

// idle fires once the session carried no byte either way for [run_live]
// idle_timeout.
func (ss *session) idle(ctx context.Context) <-chan struct{} {
	ch := make(chan struct{})
	timeout := ss.limits.IdleTimeout.Duration
	if timeout <= 0 {
		timeout = profile.DefaultRunLiveIdleTimeout
	}
	go func() {
		t := time.NewTimer(timeout)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				since := time.Since(time.Unix(0, ss.lastActive.Load()))
				if since >= timeout {
					close(ch)
					return
				}
				t.Reset(timeout - since)
			}
		}
	}()
	return ch
}

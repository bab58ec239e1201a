package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/websocket"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/apiauth"
	"crucible.dev/crucible/internal/dispatch"
	"crucible.dev/crucible/internal/httperr"
	"crucible.dev/crucible/internal/metrics"
	"crucible.dev/crucible/internal/portforward"
	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/retry"
	"crucible.dev/crucible/internal/store"
)

// Budget names of the run-live session caps ([run_live]).
const (
	budgetSessions            = "run_live_sessions"
	budgetSessionsPerIdentity = "run_live_sessions_per_identity"
	budgetSessionWriteTimeout = "run_live_write_timeout"
	budgetOpensPerIdentity    = "run_live_opens_per_identity"
)

// PortForwarder opens a session to a port of a pod on a cluster
// (fleetForwarder: through the cluster's federated client).
type PortForwarder interface {
	Forward(ctx context.Context, t ForwardTarget) (ForwardSession, error)
}

// ForwardTarget is the pod port a session goes to.
type ForwardTarget struct {
	Cluster, Namespace, Pod string
	Port                    int
	WriteTimeout            time.Duration // one write to the pod
}

// ForwardSession is one forwarded TCP connection (*portforward.Session).
type ForwardSession interface {
	io.ReadWriter
	CloseWrite() error
	Close() error
	// Ended is closed when the connection to the spoke is gone.
	Ended() <-chan bool
	// Failure is what the node reported on the error stream, if anything.
	Failure(ctx context.Context) error
}

var (
	_ ForwardSession = (*portforward.Session)(nil)
	_ PortForwarder  = fleetForwarder{}
)

// fleetForwarder dials through the cluster's one shared client: its
// rest.Config, so the session carries the controller's federated identity
// for that spoke and no credential of its own.
type fleetForwarder struct{ clients Clusters }

func (f fleetForwarder) Forward(ctx context.Context, t ForwardTarget) (ForwardSession, error) {
	c, ok := f.clients.Get(t.Cluster)
	if !ok || c.Kube == nil {
		return nil, fmt.Errorf("cluster %q: %w", t.Cluster, dispatch.ErrUnknownCluster)
	}
	s, err := portforward.Dial(ctx, portforward.Target{
		Config: c.Config, URL: portforward.URL(c.Kube.CoreV1().RESTClient(), t.Namespace, t.Pod),
		Port: t.Port, WriteTimeout: t.WriteTimeout,
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// portForward serves GET /api/pods/{pod}/portforward?port=N (R-RL1): after
// the guard authorized create on workpods/portforward for the pod's cluster,
// it refuses, in this order, an unknown pod (404), another submitter's pod
// without create-any (403), a cluster without run_live (409), a port
// outside run_live_ports (403), a pod that does not run (409), a foreign
// Origin (403), a request that is no WebSocket upgrade (426), a caller past
// the session caps or its opens a minute (429); then it opens the stream
// on the spoke — so that a spoke that refuses or cannot be reached is
// answered with a status, not a closed socket — upgrades, and relays.
func (s *Server) portForward(w http.ResponseWriter, r *http.Request) error {
	p, err := s.row(r)
	if err != nil {
		return err
	}
	if err := s.authorizeOwner(r, p); err != nil {
		return err
	}
	checked := s.profile() // no older than what allows the session: a reload after it is seen
	e, key, err := s.runLiveCluster(p.Cluster)
	if err != nil {
		return err
	}
	port, err := forwardPort(r.URL.Query().Get("port"), e, key)
	if err != nil {
		return err
	}
	if p.State != store.StateRunning {
		return httperr.New(http.StatusConflict, fmt.Sprintf("work pod %s is %s: port-forward needs a running pod", p.ID, p.State))
	}
	if err := checkOrigin(r); err != nil {
		return err
	}
	if !websocket.IsWebSocketUpgrade(r) {
		return &httperr.Error{Code: http.StatusUpgradeRequired, Header: http.Header{"Upgrade": {"websocket"}},
			Msg: "port-forward is a WebSocket: send Connection: Upgrade and Upgrade: websocket (crucible port-forward does)"}
	}
	caller := callerName(identity(r))
	limits := s.profile().RunLive
	release, err := s.acquireStream(sessionStreams, caller)
	if err != nil {
		return err
	}
	defer release()
	if err := s.spendOpen(caller, limits.OpensPerMinute, "[run_live] opens_per_minute", budgetOpensPerIdentity); err != nil {
		return err
	}
	up, err := s.Forwarder.Forward(r.Context(), ForwardTarget{Cluster: p.Cluster, Namespace: p.Namespace, Pod: p.ID,
		Port: port, WriteTimeout: limits.WriteTimeout.Duration})
	if err != nil {
		metrics.PortForwardSessions.WithLabelValues(p.Cluster, "dial_failed").Inc()
		return forwardDialError(p, port, err)
	}
	ws, err := sessionUpgrader.Upgrade(w, r, nil)
	if err != nil { // the upgrader answered the client
		_ = up.Close()
		s.Log.Info("port-forward upgrade failed", "pod", p.ID, "user", caller, "owner", p.Submitter, "error", err)
		return nil
	}
	ss := &session{s: s, r: r, ws: ws, up: up, pod: p, port: port, caller: caller, limits: limits, profile: checked}
	ss.run(r.Context())
	return nil
}

// sessionUpgrader upgrades a checked request. Origin was checked before
// (checkOrigin, answered as JSON); CheckOrigin asks again so that no path
// to Upgrade can skip it.
var sessionUpgrader = websocket.Upgrader{
	ReadBufferSize: relayChunk, WriteBufferSize: relayChunk,
	CheckOrigin: func(r *http.Request) bool { return checkOrigin(r) == nil },
}

// ownPod reports whether id submitted p: run-live into one's own pods needs
// create on workpods/portforward alone.
func ownPod(id apiauth.Identity, p store.WorkPod) bool {
	return id.User != "" && id.User == p.Submitter
}

// authorizeOwner refuses (403, naming the permission) a session into a pod
// another submitter made, unless the caller may create-any on
// workpods/portforward on its cluster: a TCP session into a pod reaches its
// code, its environment and its secret files, which create (the
// submitter's) was never meant to hand over.
func (s *Server) authorizeOwner(r *http.Request, p store.WorkPod) error {
	id := identity(r)
	if ownPod(id, p) {
		return nil
	}
	a := portForwardAnyAttributes(p.Cluster)
	err := s.Authz.Authorize(r.Context(), id, a)
	if errors.Is(err, apiauth.ErrForbidden) {
		return &httperr.Error{Code: http.StatusForbidden, Err: err, Msg: fmt.Sprintf(
			"%s may not port-forward into work pod %s, which %s submitted: another submitter's pod needs %s", callerName(id), p.ID, p.Submitter, a)}
	}
	return authError(err)
}

// runLiveCluster is the cluster entry of a session and the key path of its
// run_live in the profile, or 409 when the cluster does not enable it.
func (s *Server) runLiveCluster(name string) (profile.ClusterEntry, string, error) {
	clusters := s.profile().Clusters
	i := slices.IndexFunc(clusters, func(e profile.ClusterEntry) bool { return e.Name == name })
	if i < 0 {
		return profile.ClusterEntry{}, "", httperr.New(http.StatusConflict, fmt.Sprintf("cluster %q is not in the controller's profile: no run-live", name))
	}
	e, key := clusters[i], fmt.Sprintf("clusters[%d]", i)
	if !e.RunLive {
		return e, key, httperr.New(http.StatusConflict, fmt.Sprintf(
			"cluster %q does not enable run-live: set %s.run_live = true (the [[clusters]] entry named %q) in the controller's profile", name, key, name))
	}
	return e, key, nil
}

// runLivePorts are the ports of e that may be forwarded: run_live_ports,
// which fleet defaults to [run_live_port].
func runLivePorts(e profile.ClusterEntry) []int {
	if len(e.RunLivePorts) > 0 {
		return e.RunLivePorts
	}
	return []int{runLivePort(e)}
}

func runLivePort(e profile.ClusterEntry) int {
	if e.RunLivePort > 0 {
		return e.RunLivePort
	}
	return profile.DefaultRunLivePort
}

// forwardPort parses ?port= and refuses (403) a port the cluster does not
// allow, naming the ones it does.
func forwardPort(v string, e profile.ClusterEntry, key string) (int, error) {
	port, err := strconv.Atoi(v)
	if err != nil || port < 1 || port > 65535 || strconv.Itoa(port) != v {
		return 0, &httperr.Error{Code: http.StatusBadRequest, Field: "port", Msg: fmt.Sprintf("port %q: must be a port number from 1 to 65535", httperr.Truncate(v, 20))}
	}
	allowed := runLivePorts(e)
	if !slices.Contains(allowed, port) {
		return 0, &httperr.Error{Code: http.StatusForbidden, Field: "port", Msg: fmt.Sprintf(
			"port %d of cluster %q's pods may not be forwarded: %s.run_live_ports allows %s", port, e.Name, key, portList(allowed))}
	}
	return port, nil
}

func portList(ports []int) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ", ")
}

// checkOrigin refuses a WebSocket a page of another origin opens: a browser
// sends the SSO proxy's cookie with it, and a cross-site page must not get a
// socket into a pod with an admin's session. No Origin (the CLI) or this
// API's own (its Host) is allowed; the scheme is not compared, since a
// TLS-terminating proxy may stand in front.
func checkOrigin(r *http.Request) error {
	origins := r.Header.Values("Origin")
	if len(origins) == 0 {
		return nil
	}
	if len(origins) == 1 {
		u, err := url.Parse(origins[0])
		if err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && strings.EqualFold(u.Host, r.Host) {
			return nil
		}
	}
	return httperr.New(http.StatusForbidden, fmt.Sprintf("cross-origin WebSocket refused: Origin %q is not this API's own (Host %q)",
		httperr.Truncate(strings.Join(origins, ", "), 100), httperr.Truncate(r.Host, 100)))
}

// forwardDialError answers a spoke that did not open the stream: its own
// definitive refusal (a 403 naming the missing pods/portforward RBAC, a 404)
// as 502 with its message, anything that might pass (no answer, a 5xx, a
// 429, a broken connection) as 503 with Retry-After.
func forwardDialError(p store.WorkPod, port int, err error) error {
	what := fmt.Sprintf("port-forward to %s:%d on %s", p.ID, port, p.Cluster)
	var st apierrors.APIStatus
	if errors.As(err, &st) && !retry.IsTransient(err) || errors.Is(err, dispatch.ErrUnknownCluster) {
		return httperr.Wrap(http.StatusBadGateway, what+": "+dispatch.PublicMessage(err), err)
	}
	return httperr.Wrap(http.StatusServiceUnavailable, what+": the spoke could not open the stream; retry later", err)
}

// runLive serves GET /api/pods/{pod}/run-live.
func (s *Server) runLive(w http.ResponseWriter, r *http.Request) error {
	p, err := s.row(r)
	if err != nil {
		return err
	}
	info := apiv1.RunLive{Running: p.State == store.StateRunning}
	e, key, cerr := s.runLiveCluster(p.Cluster)
	if cerr == nil {
		info.Enabled, info.Port, info.Ports = true, runLivePort(e), runLivePorts(e)
		info.Command = "crucible run-live " + p.ID
	}
	allowed, err := s.mayForward(r, p)
	if err != nil {
		return err
	}
	info.Allowed = allowed
	info.Available = info.Enabled && info.Allowed && info.Running
	switch {
	case !info.Enabled:
		info.Reason = fmt.Sprintf("cluster %q does not enable run-live (%s.run_live in the controller's profile)", p.Cluster, key)
		if key == "" {
			info.Reason = cerr.Error()
		}
	case !info.Allowed:
		info.Reason = fmt.Sprintf("you may not port-forward to %s's pods (create on workpods/portforward)", p.Cluster)
		if !ownPod(identity(r), p) {
			info.Reason = fmt.Sprintf("you may not port-forward to %s's pods submitted by others (create and create-any on workpods/portforward)", p.Cluster)
		}
	case !info.Running:
		info.Reason = fmt.Sprintf("work pod %s is %s: run-live needs a running pod", p.ID, p.State)
	}
	writeJSON(w, http.StatusOK, info)
	return nil
}

// mayForward asks what the port-forward endpoint would: create on
// workpods/portforward, and create-any for another submitter's pod.
func (s *Server) mayForward(r *http.Request, p store.WorkPod) (bool, error) {
	attrs := []apiauth.Attributes{portForwardAttributes(p.Cluster)}
	if !ownPod(identity(r), p) {
		attrs = append(attrs, portForwardAnyAttributes(p.Cluster))
	}
	for _, a := range attrs {
		switch err := s.Authz.Authorize(r.Context(), identity(r), a); {
		case errors.Is(err, apiauth.ErrForbidden):
			return false, nil
		case err != nil:
			return false, authError(err)
		}
	}
	return true, nil
}

func portForwardAttributes(cluster string) apiauth.Attributes {
	return apiauth.Attributes{Verb: apiauth.VerbCreate, Subresource: apiauth.SubresourcePortForward, Cluster: cluster}
}

// portForwardAnyAttributes is the permission of a session into a pod
// another submitter made.
func portForwardAnyAttributes(cluster string) apiauth.Attributes {
	return apiauth.Attributes{Verb: apiauth.VerbCreateAny, Subresource: apiauth.SubresourcePortForward, Cluster: cluster}
}

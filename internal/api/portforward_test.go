package api

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/apiauth"
	"crucible.dev/crucible/internal/metrics"
	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/store"
)

// fakeForwarder is a spoke whose pods' ports are served by pod, over a
// loopback TCP pair (so half-closes are real).
type fakeForwarder struct {
	t       *testing.T
	pod     func(c net.Conn)
	err     error // Forward fails with it
	failure error // what the node reports on the error stream
	calls   atomic.Int32
	last    atomic.Value // the last session
}

func (f *fakeForwarder) Forward(_ context.Context, t ForwardTarget) (ForwardSession, error) {
	f.calls.Add(1)
	if f.err != nil {
		return nil, f.err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return nil, err
	}
	podSide, err := ln.Accept()
	if err != nil {
		return nil, err
	}
	go func() {
		defer podSide.Close()
		f.pod(podSide)
	}()
	s := &pipeSession{TCPConn: c.(*net.TCPConn), ended: make(chan bool), failure: f.failure, target: t}
	f.last.Store(s)
	return s, nil
}

type pipeSession struct {
	*net.TCPConn
	ended   chan bool
	once    sync.Once
	failure error
	target  ForwardTarget
}

func (p *pipeSession) Ended() <-chan bool                { return p.ended }
func (p *pipeSession) Failure(ctx context.Context) error { return p.failure }
func (p *pipeSession) Close() error {
	p.lose()
	return p.TCPConn.Close()
}

// lose is the connection to the spoke going away.
func (p *pipeSession) lose() { p.once.Do(func() { close(p.ended) }) }

// echo is a pod port that sends back what it gets until its peer half-closes.
func echo(c net.Conn) { _, _ = io.Copy(c, c) }

// runLiveFixture is the API fixture with run-live on wharf (ports 7777 and
// 9000) and off on dock; both pods are alice's. admin may port-forward
// into any pod everywhere, dockonly into any pod on dock only, alice into
// her own on wharf, bob into his own everywhere (so into none of these).
func runLiveFixture(t *testing.T, pod func(net.Conn)) (*fixture, *fakeForwarder) {
	t.Helper()
	f := newFixture(t)
	f.srv.Profile.Load().Clusters[0].RunLive = true
	f.srv.Profile.Load().Clusters[0].RunLivePort = 7777
	f.srv.Profile.Load().Clusters[0].RunLivePorts = []int{7777, 9000}
	f.authz.allowed["admin create/portforward *"] = true
	f.authz.allowed["admin create-any/portforward *"] = true
	f.authz.allowed["dockonly create/portforward dock"] = true
	f.authz.allowed["dockonly create-any/portforward dock"] = true
	f.authz.allowed["dockonly get wharf"] = true
	f.authz.allowed["alice create/portforward wharf"] = true
	f.authz.allowed["bob create/portforward *"] = true
	f.authz.allowed["alice get wharf"], f.authz.allowed["bob get *"] = true, true
	authn := f.srv.Authn.(fakeAuthn)
	authn["tok-alice"], authn["tok-bob"] = "alice", "bob"
	fw := &fakeForwarder{t: t, pod: pod}
	f.srv.Forwarder = fw
	f.row(t, "p-wharf", "wharf")
	f.row(t, "p-dock", "dock")
	return f, fw
}

var upgradeHeaders = map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}

func withHeaders(extra map[string]string) map[string]string {
	h := map[string]string{}
	for k, v := range upgradeHeaders {
		h[k] = v
	}
	for k, v := range extra {
		h[k] = v
	}
	return h
}

// The refusals come in the documented order — 404, 403 (permission), 409
// (run_live), 400/403 (port), 409 (not running), 403 (Origin), 426, 429 —
// each naming what to change, and none of them reaches the spoke.
func TestPortForwardRefusals(t *testing.T) {
	pf := func(pod, port string) string { return "/api/pods/" + pod + "/portforward?port=" + port }
	tests := []struct {
		name      string
		token     string
		path      string
		header    map[string]string
		setup     func(*testing.T, *fixture)
		wantCode  int
		wantError string
		// retryAfter is a 429's Retry-After; "" is the stream caps' 30.
		retryAfter string
	}{
		{name: "unknown pod", token: "tok-admin", path: pf("nope", "7777"), wantCode: 404, wantError: `work pod "nope" not found`},
		{name: "unknown pod, no right to all clusters", token: "tok-dock", path: pf("nope", "7777"), wantCode: 403,
			wantError: "forbidden: dockonly may not create workpods/portforward.crucible.dev"},
		{name: "no portforward right", token: "tok-viewer", path: pf("p-wharf", "7777"), wantCode: 403,
			wantError: "forbidden: viewer may not create workpods/portforward.crucible.dev wharf"},
		{name: "the right on dock, not wharf", token: "tok-dock", path: pf("p-wharf", "7777"), wantCode: 403,
			wantError: "forbidden: dockonly may not create workpods/portforward.crucible.dev wharf"},
		{name: "another submitter's pod, without create-any", token: "tok-bob", path: pf("p-wharf", "7777"), wantCode: 403,
			wantError: "bob may not port-forward into work pod p-wharf, which alice submitted: another submitter's pod needs create-any workpods/portforward.crucible.dev wharf"},
		{name: "run_live off, before the port", token: "tok-dock", path: pf("p-dock", "1"), wantCode: 409,
			wantError: `cluster "dock" does not enable run-live: set clusters[1].run_live = true (the [[clusters]] entry named "dock") in the controller's profile`},
		{name: "port not allowed", token: "tok-admin", path: pf("p-wharf", "8080"), wantCode: 403,
			wantError: `port 8080 of cluster "wharf"'s pods may not be forwarded: clusters[0].run_live_ports allows 7777, 9000`},
		{name: "no port", token: "tok-admin", path: "/api/pods/p-wharf/portforward", wantCode: 400, wantError: `port "": must be a port number from 1 to 65535`},
		{name: "port not a number", token: "tok-admin", path: pf("p-wharf", "07777"), wantCode: 400, wantError: `port "07777": must be a port number from 1 to 65535`},
		{name: "not running, before Origin", token: "tok-admin", path: pf("p-wharf", "7777"), header: map[string]string{"Origin": "https://evil.example"},
			setup: func(t *testing.T, f *fixture) { finish(t, f, "p-wharf", store.StateSucceeded) }, wantCode: 409,
			wantError: "work pod p-wharf is succeeded: port-forward needs a running pod"},
		{name: "foreign Origin", token: "tok-admin", path: pf("p-wharf", "7777"), header: map[string]string{"Origin": "https://evil.example"}, wantCode: 403,
			wantError: `cross-origin WebSocket refused: Origin "https://evil.example" is not this API's own (Host "127.0.0.1:8080")`},
		{name: "Origin of another port", token: "tok-admin", path: pf("p-wharf", "7777"), header: map[string]string{"Origin": "http://127.0.0.1:9999"}, wantCode: 403,
			wantError: `cross-origin WebSocket refused: Origin "http://127.0.0.1:9999" is not this API's own (Host "127.0.0.1:8080")`},
		{name: "null Origin", token: "tok-admin", path: pf("p-wharf", "7777"), header: map[string]string{"Origin": "null"}, wantCode: 403,
			wantError: `cross-origin WebSocket refused: Origin "null" is not this API's own (Host "127.0.0.1:8080")`},
		{name: "no upgrade", token: "tok-admin", path: pf("p-wharf", "7777"), header: map[string]string{"Connection": "", "Upgrade": ""}, wantCode: 426,
			wantError: "port-forward is a WebSocket: send Connection: Upgrade and Upgrade: websocket (crucible port-forward does)"},
		{name: "per-identity cap", token: "tok-admin", path: pf("p-wharf", "7777"), wantCode: 429,
			setup: func(t *testing.T, f *fixture) {
				takeSession(t, f.srv, "admin")
				f.srv.Profile.Load().RunLive.MaxSessionsPerIdentity = 1
			},
			wantError: "too many port-forward sessions open for admin: [run_live] max_sessions_per_identity is 1"},
		{name: "cap in all", token: "tok-admin", path: pf("p-wharf", "7777"), wantCode: 429,
			setup: func(t *testing.T, f *fixture) {
				takeSession(t, f.srv, "alice")
				takeSession(t, f.srv, "bob")
				f.srv.Profile.Load().RunLive.MaxSessions = 2
			},
			wantError: "too many port-forward sessions open: [run_live] max_sessions is 2"},
		{name: "opens a minute", token: "tok-admin", path: pf("p-wharf", "7777"), wantCode: 429, retryAfter: "60",
			setup: func(t *testing.T, f *fixture) {
				f.srv.Profile.Load().RunLive.OpensPerMinute = 1
				if err := f.srv.spendOpen("admin", 1, "[run_live] opens_per_minute", budgetOpensPerIdentity); err != nil {
					t.Fatal(err)
				}
			},
			wantError: "admin opened too many sessions: [run_live] opens_per_minute is 1; retry in 60 s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, fw := runLiveFixture(t, echo)
			if tt.setup != nil {
				tt.setup(t, f)
			}
			w := f.do(t, req{path: tt.path, token: tt.token, header: withHeaders(tt.header)})
			if w.Code != tt.wantCode {
				t.Fatalf("code = %d, want %d; body %s", w.Code, tt.wantCode, w.Body)
			}
			if got := errorOf(t, w); got != tt.wantError {
				t.Errorf("error = %q\nwant    %q", got, tt.wantError)
			}
			if tt.wantCode == 429 {
				want := tt.retryAfter
				if want == "" {
					want = "30"
				}
				if got := w.Header().Get("Retry-After"); got != want {
					t.Errorf("Retry-After = %q, want %s", got, want)
				}
			}
			if n := fw.calls.Load(); n != 0 {
				t.Errorf("a refused request reached the spoke %d times", n)
			}
		})
	}
}

func finish(t *testing.T, f *fixture, id string, st store.State) {
	t.Helper()
	if _, err := f.st.TransitionWorkPod(t.Context(), id, store.Transition{From: store.LiveStates, To: st, Finish: true}); err != nil {
		t.Fatal(err)
	}
}

// A cap refusal is counted under its budget.
func TestPortForwardCapCounted(t *testing.T) {
	f, _ := runLiveFixture(t, echo)
	f.srv.Profile.Load().RunLive.MaxSessionsPerIdentity = 1
	release, err := f.srv.acquireStream(sessionStreams, "admin")
	if err != nil {
		t.Fatal(err)
	}
	c := metrics.BudgetRefusals.WithLabelValues(budgetSessionsPerIdentity)
	before := testutil.ToFloat64(c)
	if _, err := f.srv.acquireStream(sessionStreams, "admin"); err == nil {
		t.Fatal("a second session of one caller past max_sessions_per_identity = 1 was allowed")
	}
	if got := testutil.ToFloat64(c) - before; got != 1 {
		t.Errorf("refusals counted %v, want 1", got)
	}
	release()
	release() // twice is once
	if _, err := f.srv.acquireStream(sessionStreams, "admin"); err != nil {
		t.Errorf("after release: %v", err)
	}
}

// A spoke that refuses the stream is a 502 with its message; one that
// cannot be reached a 503 with Retry-After.
func TestPortForwardDialFailures(t *testing.T) {
	for _, tt := range []struct {
		name     string
		err      error
		wantCode int
		wantMsg  string
	}{
		{"unreachable", errors.New("dial tcp 10.0.0.7:6443: " + internalDetail), 503, "port-forward to p-wharf:7777 on wharf: the spoke could not open the stream; retry later"},
		{"forbidden", apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "p-wharf", errors.New("no RBAC")), 502,
			"port-forward to p-wharf:7777 on wharf: the spoke denied it (check the RBAC of `crucible render spoke`): pods \"p-wharf\" is forbidden: no RBAC"},
		{"spoke busy", apierrors.NewTooManyRequests("slow down", 1), 503, "port-forward to p-wharf:7777 on wharf: the spoke could not open the stream; retry later"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f, fw := runLiveFixture(t, echo)
			fw.err = tt.err
			w := f.do(t, req{path: "/api/pods/p-wharf/portforward?port=7777", token: "tok-admin", header: withHeaders(nil)})
			if w.Code != tt.wantCode || errorOf(t, w) != tt.wantMsg {
				t.Fatalf("got %d %q, want %d %q", w.Code, errorOf(t, w), tt.wantCode, tt.wantMsg)
			}
			if strings.Contains(w.Body.String(), "secret-internal-detail") {
				t.Errorf("internal detail reached the client: %s", w.Body)
			}
		})
	}
}

// dialSession opens a real WebSocket session through the API's mux; with
// sameOrigin, as a page of the API's own origin would.
func dialSession(t *testing.T, f *fixture, pod, token string, sameOrigin bool) (*websocket.Conn, *httptest.Server) {
	t.Helper()
	srv := httptest.NewServer(f.mux)
	t.Cleanup(srv.Close)
	header := http.Header{}
	if sameOrigin {
		header.Set("Origin", srv.URL)
	}
	header.Set("Authorization", "Bearer "+token)
	u := "ws" + strings.TrimPrefix(srv.URL, "http") + "/api/pods/" + pod + "/portforward?port=7777"
	ws, resp, err := websocket.DefaultDialer.DialContext(t.Context(), u, header)
	if err != nil {
		body := ""
		if resp != nil {
			b, _ := io.ReadAll(resp.Body)
			body = string(b)
		}
		t.Fatalf("dial: %v %s", err, body)
	}
	t.Cleanup(func() { ws.Close() })
	return ws, srv
}

// Bytes go both ways unchanged (a MiB in odd-sized messages, its echo
// compared by SHA-256); the caller's empty message half-closes, after which
// the pod's answer still arrives; the session is logged with its bytes
// and counted.
func TestPortForwardRelaysBothWays(t *testing.T) {
	f, _ := runLiveFixture(t, echo)
	logs := &lockedBuffer{}
	f.srv.Log = slog.New(slog.NewTextHandler(logs, nil))
	sessions := metrics.PortForwardSessions.WithLabelValues("wharf", outcomePodClosed)
	before := testutil.ToFloat64(sessions)
	ws, _ := dialSession(t, f, "p-wharf", "tok-admin", true) // the API's own origin is allowed
	payload := make([]byte, 1<<20+17)
	_, _ = rand.Read(payload)
	go func() {
		for rest := payload; len(rest) > 0; {
			n := min(len(rest), 7001)
			if err := ws.WriteMessage(websocket.BinaryMessage, rest[:n]); err != nil {
				return
			}
			rest = rest[n:]
		}
		_ = ws.WriteMessage(websocket.BinaryMessage, nil) // half-close: the echo then ends
	}()
	var got bytes.Buffer
	code, reason := readAll(t, ws, &got)
	if sha256.Sum256(got.Bytes()) != sha256.Sum256(payload) {
		t.Fatalf("echo of %d bytes differs from the %d sent", got.Len(), len(payload))
	}
	if code != websocket.CloseNormalClosure || reason != "work pod p-wharf closed the connection on port 7777" {
		t.Errorf("close %d %q", code, reason)
	}
	waitFor(t, "the session's log line", func() bool { return logs.lines("port-forward session ended") == 1 })
	logs.mu.Lock()
	line := logs.b.String()
	logs.mu.Unlock()
	for _, want := range []string{"user=admin", "cluster=wharf", "pod=p-wharf", "port=7777", "bytes_to_pod=1048593", "bytes_from_pod=1048593", "outcome=pod_closed"} {
		if !strings.Contains(line, want) {
			t.Errorf("log lacks %s:\n%s", want, line)
		}
	}
	if strings.Contains(line, "tok-admin") {
		t.Error("the token was logged")
	}
	if got := testutil.ToFloat64(sessions) - before; got != 1 {
		t.Errorf("pod_closed sessions counted %v, want 1", got)
	}
}

// readAll reads binary messages into w until the close frame, whose code
// and reason it returns.
func readAll(t *testing.T, ws *websocket.Conn, w io.Writer) (int, string) {
	t.Helper()
	_ = ws.SetReadDeadline(time.Now().Add(time.Minute))
	for {
		_, rd, err := ws.NextReader()
		var ce *websocket.CloseError
		if errors.As(err, &ce) {
			return ce.Code, ce.Text
		}
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		if _, err := io.Copy(w, rd); err != nil {
			t.Fatal(err)
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 30s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Each way a session ends has its close code and a reason saying why.
func TestPortForwardEndings(t *testing.T) {
	hold := func(c net.Conn) { _, _ = io.Copy(io.Discard, c) } // reads, never answers
	tests := []struct {
		name       string
		pod        func(net.Conn)
		token      string // "": tok-admin
		setup      func(*fixture, *fakeForwarder)
		during     func(*fixture, *fakeForwarder)
		wantCode   int
		wantReason string
	}{
		{name: "pod ended", pod: func(c net.Conn) {},
			setup: func(f *fixture, _ *fakeForwarder) {
				f.srv.Settler = settlerFunc(func(ctx context.Context, id string) (store.WorkPod, error) {
					return store.WorkPod{ID: id, State: store.StateSucceeded}, nil
				})
			},
			wantCode: websocket.CloseGoingAway, wantReason: "work pod p-wharf ended: succeeded"},
		{name: "node reports a failure", pod: func(c net.Conn) {},
			setup:    func(_ *fixture, fw *fakeForwarder) { fw.failure = errors.New("connection refused on port 7777") },
			wantCode: websocket.CloseInternalServerErr, wantReason: "port 7777 of work pod p-wharf: connection refused on port 7777"},
		{name: "spoke connection lost", pod: hold,
			during:   func(_ *fixture, fw *fakeForwarder) { fw.last.Load().(*pipeSession).lose() },
			wantCode: websocket.CloseInternalServerErr, wantReason: "the connection to wharf's API server was lost"},
		{name: "idle", pod: hold,
			setup: func(f *fixture, _ *fakeForwarder) {
				f.srv.Profile.Load().RunLive.IdleTimeout = profile.Duration{Duration: 50 * time.Millisecond}
			},
			wantCode: websocket.CloseNormalClosure, wantReason: "idle for 50ms ([run_live] idle_timeout)"},
		{name: "permission gone", pod: hold,
			setup: func(f *fixture, _ *fakeForwarder) {
				f.srv.Profile.Load().API.StreamRecheck = profile.Duration{Duration: 20 * time.Millisecond}
			},
			during: func(f *fixture, _ *fakeForwarder) {
				f.authz.mu.Lock()
				delete(f.authz.allowed, "admin create/portforward *")
				f.authz.mu.Unlock()
			},
			wantCode: websocket.ClosePolicyViolation, wantReason: "permission revoked: forbidden: admin may not create workpods/portforward.crucible.dev wharf"},
		{name: "create-any gone, another submitter's pod", pod: hold,
			setup: func(f *fixture, _ *fakeForwarder) {
				f.srv.Profile.Load().API.StreamRecheck = profile.Duration{Duration: 20 * time.Millisecond}
			},
			during: func(f *fixture, _ *fakeForwarder) {
				f.authz.mu.Lock()
				delete(f.authz.allowed, "admin create-any/portforward *")
				f.authz.mu.Unlock()
			},
			wantCode: websocket.ClosePolicyViolation, wantReason: "permission revoked: forbidden: admin may not create-any workpods/portforward.crucible.dev wharf"},
		{name: "one's own pod needs no create-any", pod: hold, token: "tok-alice",
			setup: func(f *fixture, _ *fakeForwarder) {
				f.srv.Profile.Load().API.StreamRecheck = profile.Duration{Duration: 20 * time.Millisecond}
				f.srv.Profile.Load().RunLive.MaxSession = profile.Duration{Duration: 300 * time.Millisecond}
			},
			wantCode: websocket.ClosePolicyViolation, wantReason: "open for 300ms ([run_live] max_session)"},
		{name: "run_live turned off by a reload", pod: hold,
			during: func(f *fixture, _ *fakeForwarder) {
				reload(f, func(p *profile.Profile) { p.Clusters[0].RunLive = false })
			},
			wantCode: websocket.ClosePolicyViolation, wantReason: `cluster "wharf" no longer enables run-live (clusters[0].run_live)`},
		{name: "the port dropped from run_live_ports by a reload", pod: hold,
			during: func(f *fixture, _ *fakeForwarder) {
				reload(f, func(p *profile.Profile) { p.Clusters[0].RunLivePorts = []int{9000} })
			},
			wantCode: websocket.ClosePolicyViolation, wantReason: "port 7777 is no longer in clusters[0].run_live_ports"},
		{name: "the cluster removed by a reload", pod: hold,
			during: func(f *fixture, _ *fakeForwarder) {
				reload(f, func(p *profile.Profile) { p.Clusters = p.Clusters[1:] })
			},
			wantCode: websocket.ClosePolicyViolation, wantReason: `cluster "wharf" is no longer in the controller's profile`},
		{name: "max_session", pod: echo,
			setup: func(f *fixture, _ *fakeForwarder) {
				f.srv.Profile.Load().RunLive.MaxSession = profile.Duration{Duration: 200 * time.Millisecond}
			},
			wantCode: websocket.ClosePolicyViolation, wantReason: "open for 200ms ([run_live] max_session)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, fw := runLiveFixture(t, tt.pod)
			if tt.setup != nil {
				tt.setup(f, fw)
			}
			token := tt.token
			if token == "" {
				token = "tok-admin"
			}
			ws, _ := dialSession(t, f, "p-wharf", token, false)
			if tt.during != nil {
				tt.during(f, fw)
			}
			code, reason := readAll(t, ws, io.Discard)
			if code != tt.wantCode || !strings.HasPrefix(reason, tt.wantReason) {
				t.Errorf("close %d %q, want %d %q", code, reason, tt.wantCode, tt.wantReason)
			}
		})
	}
}

// reload puts in force a copy of f's profile that change changed, as a
// profile reload does.
func reload(f *fixture, change func(*profile.Profile)) {
	next := *f.srv.Profile.Load()
	next.Clusters = slices.Clone(next.Clusters)
	change(&next)
	f.srv.Profile.Store(&next)
}

// GET /api/pods/{pod}/run-live says whether run-live is available and why
// not, naming what to change.
func TestRunLiveInfo(t *testing.T) {
	tests := []struct {
		name, pod, token string
		setup            func(*testing.T, *fixture)
		want             apiv1.RunLive
	}{
		{name: "available", pod: "p-wharf", token: "tok-admin", want: apiv1.RunLive{Enabled: true, Port: 7777, Ports: []int{7777, 9000}, Allowed: true,
			Running: true, Available: true, Command: "crucible run-live p-wharf"}},
		{name: "not enabled", pod: "p-dock", token: "tok-admin", want: apiv1.RunLive{Allowed: true, Running: true,
			Reason: `cluster "dock" does not enable run-live (clusters[1].run_live in the controller's profile)`}},
		{name: "not allowed", pod: "p-wharf", token: "tok-dock", want: apiv1.RunLive{Enabled: true, Port: 7777, Ports: []int{7777, 9000}, Running: true,
			Command: "crucible run-live p-wharf", Reason: "you may not port-forward to wharf's pods submitted by others (create and create-any on workpods/portforward)"}},
		{name: "another submitter's pod", pod: "p-wharf", token: "tok-bob", want: apiv1.RunLive{Enabled: true, Port: 7777, Ports: []int{7777, 9000}, Running: true,
			Command: "crucible run-live p-wharf", Reason: "you may not port-forward to wharf's pods submitted by others (create and create-any on workpods/portforward)"}},
		{name: "one's own pod", pod: "p-wharf", token: "tok-alice", want: apiv1.RunLive{Enabled: true, Port: 7777, Ports: []int{7777, 9000}, Allowed: true,
			Running: true, Available: true, Command: "crucible run-live p-wharf"}},
		{name: "finished", pod: "p-wharf", token: "tok-admin", setup: func(t *testing.T, f *fixture) { finish(t, f, "p-wharf", store.StateFailed) },
			want: apiv1.RunLive{Enabled: true, Port: 7777, Ports: []int{7777, 9000}, Allowed: true, Command: "crucible run-live p-wharf",
				Reason: "work pod p-wharf is failed: run-live needs a running pod"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, _ := runLiveFixture(t, echo)
			if tt.setup != nil {
				tt.setup(t, f)
			}
			w := f.do(t, req{path: "/api/pods/" + tt.pod + "/run-live", token: tt.token})
			if w.Code != http.StatusOK {
				t.Fatalf("code %d: %s", w.Code, w.Body)
			}
			var got apiv1.RunLive
			if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("run-live (-want +got):\n%s", d)
			}
		})
	}
}

// takeSession holds one of s's run-live session slots for caller until the
// test ends.
func takeSession(t *testing.T, s *Server, caller string) {
	t.Helper()
	release, err := s.acquireStream(sessionStreams, caller)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
}

// With auth "none" (no authenticator, allow all) nothing changes: the
// anonymous caller reaches a pod whoever submitted it.
func TestPortForwardAuthNoneReachesEveryPod(t *testing.T) {
	f, _ := runLiveFixture(t, echo)
	f.srv.Authn, f.srv.Authz = apiauth.Anonymous{}, apiauth.AllowAll{}
	ws, _ := dialSession(t, f, "p-wharf", "", false) // alice's pod
	if err := ws.WriteMessage(websocket.BinaryMessage, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	_ = ws.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, got, err := ws.ReadMessage(); err != nil || string(got) != "hi" {
		t.Fatalf("echo %q, %v; want hi", got, err)
	}
}

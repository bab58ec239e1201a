package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gorilla/websocket"

	"crucible.dev/crucible/internal/api/apiv1"
)

func TestParsePortSpec(t *testing.T) {
	tests := []struct {
		in      string
		want    portSpec
		wantErr string
	}{
		{in: "7777", want: portSpec{7777, 7777}},
		{in: "8080:7777", want: portSpec{8080, 7777}},
		{in: ":7777", want: portSpec{0, 7777}},
		{in: "0:7777", want: portSpec{0, 7777}},
		{in: "65535:1", want: portSpec{65535, 1}},
		{in: "", wantErr: `port "": REMOTE must be a port number from 1 to 65535, not ""`},
		{in: "0", wantErr: `port "0": REMOTE must be a port number from 1 to 65535, not "0"`},
		{in: "8080:", wantErr: `port "8080:": REMOTE must be a port number from 1 to 65535, not ""`},
		{in: "8080:70000", wantErr: `port "8080:70000": REMOTE must be a port number from 1 to 65535, not "70000"`},
		{in: "x:7777", wantErr: `port "x:7777": LOCAL must be a port number from 0 to 65535, not "x"`},
		{in: "-1:7777", wantErr: `port "-1:7777": LOCAL must be a port number from 0 to 65535, not "-1"`},
		{in: "1:2:3", wantErr: `port "1:2:3": REMOTE must be a port number from 1 to 65535, not "2:3"`},
		{in: "+80", wantErr: `port "+80": REMOTE must be a port number from 1 to 65535, not "+80"`},
		{in: "007777", wantErr: `port "007777": REMOTE must be a port number from 1 to 65535, not "007777"`},
	}
	for _, tt := range tests {
		got, err := parsePortSpec(tt.in)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("parsePortSpec(%q) = %v, %v; want error %q", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("parsePortSpec(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

// A spec that parses is within bounds and prints back to itself; one that
// does not names the input.
func FuzzParsePortSpec(f *testing.F) {
	for _, s := range []string{"7777", "8080:7777", ":7777", "0:7777", "", ":", "1:2:3", "65536", "x", "٣:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := parsePortSpec(s)
		if err != nil {
			if !strings.Contains(err.Error(), "port ") {
				t.Fatalf("error %q does not say which port", err)
			}
			return
		}
		if p.Remote < 1 || p.Remote > 65535 || p.Local < 0 || p.Local > 65535 {
			t.Fatalf("%q parsed out of bounds: %+v", s, p)
		}
		if q, err := parsePortSpec(p.String()); err != nil || q != p {
			t.Fatalf("%q → %v → %v, %v", s, p, q, err)
		}
	})
}

func TestListenAddresses(t *testing.T) {
	got, err := listenAddresses([]string{"localhost", " 10.0.0.1"})
	want := []listenAddr{{ip: "127.0.0.1"}, {ip: "::1", optional: true}, {ip: "10.0.0.1"}}
	if err != nil || !cmp.Equal(want, got, cmp.AllowUnexported(listenAddr{})) {
		t.Errorf("got %v, %v", got, err)
	}
	if _, err := listenAddresses([]string{"example.com"}); err == nil || err.Error() != `--address "example.com": want localhost or an IP address` {
		t.Errorf("a name: %v", err)
	}
}

// fakeRelayAPI is the controller's side: GET /run-live, and
// /portforward upgraded to an echo, recording what each session got.
type fakeRelayAPI struct {
	mu      sync.Mutex
	headers []http.Header
	ports   []string
	closes  []string // the close reasons the clients sent
	// refuse answers every upgrade with this status and error.
	refuse int
	// endWith closes every session at once with this code and reason.
	endWith *websocket.CloseError
}

func (a *fakeRelayAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasSuffix(r.URL.Path, "/run-live") {
		_ = json.NewEncoder(w).Encode(apiv1.RunLive{Enabled: true, Allowed: true, Running: true, Available: true, Port: 7777, Ports: []int{7777}})
		return
	}
	a.mu.Lock()
	a.headers = append(a.headers, r.Header.Clone())
	a.ports = append(a.ports, r.URL.Query().Get("port"))
	refuse, endWith := a.refuse, a.endWith
	a.mu.Unlock()
	if refuse != 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(refuse)
		_, _ = io.WriteString(w, `{"error": "work pod p is succeeded: port-forward needs a running pod"}`)
		return
	}
	ws, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer ws.Close()
	if endWith != nil {
		_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(endWith.Code, endWith.Text), time.Now().Add(time.Second))
		return
	}
	for {
		mt, msg, err := ws.ReadMessage()
		var ce *websocket.CloseError
		if errors.As(err, &ce) {
			a.mu.Lock()
			a.closes = append(a.closes, ce.Text)
			a.mu.Unlock()
			return
		}
		if err != nil {
			return
		}
		if err := ws.WriteMessage(mt, msg); err != nil {
			return
		}
	}
}

func (a *fakeRelayAPI) got() (headers []http.Header, ports, closes []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.headers, a.ports, a.closes
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startForward runs the command line in the background and returns the
// local address it printed, its output and its result.
func startForward(t *testing.T, ctx context.Context, args ...string) (string, *syncBuffer, <-chan error) {
	t.Helper()
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- Run(ctx, args, out, io.Discard) }()
	re := regexp.MustCompile(`Forwarding from (127\.0\.0\.1:\d+) -> (\d+)`)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			return m[1], out, done
		}
		select {
		case err := <-done:
			t.Fatalf("ended before listening: %v\n%s", err, out)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing listened within 30s:\n%s", out)
		}
	}
}

// port-forward listens, relays each accepted connection through its own
// WebSocket with the caller's credentials and the CLI's header, and Ctrl-C
// closes the listener and every open relay with a close frame.
func TestPortForwardLifecycle(t *testing.T) {
	fake := &fakeRelayAPI{}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	addr, out, done := startForward(t, ctx, "port-forward", "--server", srv.URL, "--token", "tok-1", "--address", "127.0.0.1", "p", ":7777")

	var conns []net.Conn
	for i := range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		msg := []byte("hello " + string(rune('a'+i)))
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(msg))
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("echo %q, %v; want %q", got, err, msg)
		}
	}
	headers, ports, _ := fake.got()
	if len(headers) != 2 {
		t.Fatalf("%d relays for 2 connections", len(headers))
	}
	for _, h := range headers {
		if h.Get("Authorization") != "Bearer tok-1" || h.Get(apiv1.ClientHeader) != "crucible-cli" || h.Get("Origin") != "" {
			t.Errorf("relay headers: Authorization %q, %s %q, Origin %q", h.Get("Authorization"), apiv1.ClientHeader, h.Get(apiv1.ClientHeader), h.Get("Origin"))
		}
	}
	if !cmp.Equal(ports, []string{"7777", "7777"}) {
		t.Errorf("remote ports %v", ports)
	}
	if n := strings.Count(out.String(), "Handling connection for "); n != 2 {
		t.Errorf("%d 'Handling connection' lines:\n%s", n, out)
	}

	cancel() // Ctrl-C
	select {
	case err := <-done:
		var ee *ExitError
		if !errors.As(err, &ee) || ee.Code != ExitInterrupted {
			t.Errorf("after Ctrl-C: %v, want exit %d", err, ExitInterrupted)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("still running 30s after Ctrl-C")
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Error("the listener is still open")
	}
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Errorf("an open local connection after Ctrl-C: %v, want EOF", err)
		}
	}
	waitUntil(t, "the relays' close frames", func() bool { _, _, closes := fake.got(); return len(closes) == 2 })
	if _, _, closes := fake.got(); !cmp.Equal(closes, []string{"the client stopped", "the client stopped"}) {
		t.Errorf("close reasons %q", closes)
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 30s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A refusal that no retry can change (the pod no longer runs), or a
// session the controller ends because the pod ended, stops port-forward
// with the controller's words.
func TestPortForwardStopsForGood(t *testing.T) {
	for _, tt := range []struct {
		name    string
		fake    *fakeRelayAPI
		wantErr string
	}{
		{"refused", &fakeRelayAPI{refuse: http.StatusConflict},
			"port-forward stopped: p:7777: work pod p is succeeded: port-forward needs a running pod (HTTP 409)"},
		{"pod ended", &fakeRelayAPI{endWith: &websocket.CloseError{Code: websocket.CloseGoingAway, Text: "work pod p ended: succeeded"}},
			"port-forward stopped: work pod p ended: succeeded"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(tt.fake)
			defer srv.Close()
			addr, _, done := startForward(t, t.Context(), "port-forward", "--server", srv.URL, "--address", "127.0.0.1", "p", "0:7777")
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			select {
			case err := <-done:
				if err == nil || err.Error() != tt.wantErr {
					t.Errorf("got %v\nwant %s", err, tt.wantErr)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("still forwarding")
			}
		})
	}
}

// run-live asks the controller for the run-live port and forwards it.
func TestRunLiveForwardsTheRunLivePort(t *testing.T) {
	fake := &fakeRelayAPI{}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	addr, out, _ := startForward(t, t.Context(), "run-live", "--server", srv.URL, "--address", "127.0.0.1", "p", "0")
	if !strings.Contains(out.String(), "-> 7777") {
		t.Errorf("output %q", out)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = c.Write([]byte("x"))
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	if _, ports, _ := fake.got(); !cmp.Equal(ports, []string{"7777"}) {
		t.Errorf("remote ports %v", ports)
	}
}

// A port that is taken is named, and bad specs and addresses fail before
// anything listens.
func TestPortForwardUsageErrors(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := taken.Addr().(*net.TCPAddr).Port
	for _, tt := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"p", "abc"}, `port "abc": REMOTE must be a port number from 1 to 65535, not "abc"`},
		{[]string{"--address", "nowhere", "p", "7777"}, `--address "nowhere": want localhost or an IP address`},
		{[]string{"--address", "127.0.0.1", "p", strconv.Itoa(port) + ":7777"}, "listen on 127.0.0.1:" + strconv.Itoa(port) + " for " + strconv.Itoa(port) + ":7777: "},
	} {
		err := Run(t.Context(), append([]string{"port-forward", "--server", "http://127.0.0.1:1"}, tt.args...), io.Discard, io.Discard)
		if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) {
			t.Errorf("%v: %v, want %s", tt.args, err, tt.wantErr)
		}
	}
}

// TestWSToLocalCopiesThroughOneBuffer: the pod's messages reach the local
// connection whole and in order, and relaying them allocates far less
// than a message's worth of buffer each. io.Copy took a fresh 32 KiB
// buffer per message, and that garbage was most of the relay's p99 in the
// runlive benchmark (issue 41).
func TestWSToLocalCopiesThroughOneBuffer(t *testing.T) {
	const messages, size = 2000, 1 << 10
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		msg := make([]byte, size)
		for i := range messages {
			msg[0], msg[1] = byte(i>>8), byte(i)
			if ws.WriteMessage(websocket.BinaryMessage, msg) != nil {
				return
			}
		}
		_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	}))
	defer srv.Close()
	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	local, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	far, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer far.Close()
	got := make(chan error, 1)
	go func() { // the local client reads every message back, in order
		buf := make([]byte, size)
		for i := range messages {
			if _, err := io.ReadFull(far, buf); err != nil {
				got <- fmt.Errorf("message %d: %w", i, err)
				return
			}
			if buf[0] != byte(i>>8) || buf[1] != byte(i) {
				got <- fmt.Errorf("message %d arrived as %d", i, int(buf[0])<<8|int(buf[1]))
				return
			}
		}
		got <- nil
	}()

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err = wsToLocal(ws, local)
	runtime.ReadMemStats(&after)
	if !websocket.IsCloseError(err, websocket.CloseNormalClosure) {
		t.Fatalf("wsToLocal ended with %v, want the controller's normal close", err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	perMessage := (after.TotalAlloc - before.TotalAlloc) / messages
	t.Logf("%d bytes allocated a message", perMessage)
	if perMessage > size {
		t.Errorf("relaying a %d-byte message allocated %d bytes, want at most %d (a buffer a message?)", size, perMessage, size)
	}
}

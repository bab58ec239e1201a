package portforward

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
)

// silentSpoke is an API server that answers a port-forward's WebSocket
// upgrade (accept is true) or not even that, and then never says another
// word. open counts the connections it holds: one ends when the client
// closes it.
type silentSpoke struct {
	srv    *httptest.Server
	accept bool
	mu     sync.Mutex
	open   int
	conns  []net.Conn
}

func newSilentSpoke(t *testing.T, accept bool) *silentSpoke {
	t.Helper()
	s := &silentSpoke{accept: accept}
	up := websocket.Upgrader{Subprotocols: []string{"SPDY/3.1+" + portforward.PortForwardProtocolV1Name}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.add(1)
		defer s.add(-1)
		if !s.accept {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			s.track(conn)
			buf := make([]byte, 4096) // the upgrade request, unanswered; EOF once the client closes
			for {
				if _, err := conn.Read(buf); err != nil {
					return
				}
			}
		}
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		s.track(ws.NetConn())
		for {
			if _, _, err := ws.NextReader(); err != nil {
				return
			}
		}
	}))
	t.Cleanup(s.srv.Close)
	t.Cleanup(s.closeAll) // first: a leaked connection must not hang Close
	return s
}

func (s *silentSpoke) track(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.conns = append(s.conns, c)
}

func (s *silentSpoke) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		_ = c.Close()
	}
}

func mustURL(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func (s *silentSpoke) add(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.open += n
}

func (s *silentSpoke) held() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open
}

// A spoke that never answers (its upgrade, or what follows an upgrade it
// accepted) fails each dial by its deadline, or as soon as the caller gives
// up, and every abandoned dial closes its connection at once: after 20
// attempts each the spokes hold no connection, and the goroutines are back
// where they were once client-go's own 30-second wait for a stream reply
// (which nothing else ends) has passed.
func TestSilentSpokeLeaksNothing(t *testing.T) {
	before := runtime.NumGoroutine()
	t.Run("cases", func(t *testing.T) {
		for _, tt := range []struct {
			name   string
			accept bool
			ctx    bool // the caller gives up first (its context), not the deadline
		}{
			{"upgrade never answered, handshake deadline", false, false},
			{"upgrade accepted then silence, handshake deadline", true, false},
			{"upgrade never answered, caller gives up", false, true},
			{"upgrade accepted then silence, caller gives up", true, true},
		} {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				spoke := newSilentSpoke(t, tt.accept)
				dialSilently(t, spoke, tt.ctx)
				waitUntil(t, 2*time.Second, func() bool { return spoke.held() == 0 },
					func() string {
						return fmt.Sprintf("the spoke still holds %d connections of %d abandoned dials", spoke.held(), attempts)
					})
			})
		}
	})
	waitUntil(t, 45*time.Second, func() bool { return runtime.NumGoroutine() <= before+2 },
		func() string { return fmt.Sprintf("goroutines %d → %d", before, runtime.NumGoroutine()) })
}

const attempts = 20

// dialSilently dials spoke attempts times at once, each given up after
// 300 ms by its handshake deadline or (callerGivesUp) its context.
func dialSilently(t *testing.T, spoke *silentSpoke, callerGivesUp bool) {
	t.Helper()
	cfg := &rest.Config{Host: spoke.srv.URL}
	u := mustURL(t, spoke.srv.URL+"/api/v1/namespaces/loops/pods/p/portforward")
	var wg sync.WaitGroup
	for range attempts {
		wg.Go(func() {
			wait, handshake := time.Minute, 300*time.Millisecond
			if callerGivesUp {
				wait, handshake = handshake, wait
			}
			ctx, cancel := context.WithTimeout(t.Context(), wait)
			defer cancel()
			start := time.Now()
			s, err := Dial(ctx, Target{Config: cfg, URL: u, Port: 7777, HandshakeTimeout: handshake})
			if err == nil {
				_ = s.Close()
				t.Error("a silent spoke opened a session")
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("a dial took %s, want about 300ms", took)
			}
		})
	}
	wg.Wait()
}

func waitUntil(t *testing.T, within time.Duration, cond func() bool, what func() string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", within, what())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

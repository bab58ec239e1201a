package api

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/util/wait"

	"crucible.dev/crucible/internal/apiauth"
	"crucible.dev/crucible/internal/fleet"
	"crucible.dev/crucible/internal/live"
	"crucible.dev/crucible/internal/metrics"
	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/store"
)

// floodSource is a running pod that prints lines lines of 60 KB, as fast as
// they are read, then nothing until its reader goes.
type floodSource struct{ lines int }

func (floodSource) Status(context.Context) (live.Status, error) {
	return live.Status{Started: true}, nil
}

func (f floodSource) Open(ctx context.Context, _ time.Time, _ bool) (io.ReadCloser, error) {
	pr, pw := io.Pipe()
	go func() {
		text := strings.Repeat("x", 60000)
		base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		for i := 0; i < f.lines && ctx.Err() == nil; i++ {
			line := base.Add(time.Duration(i)*time.Microsecond).Format(time.RFC3339Nano) + " " + text + "\n"
			if _, err := io.WriteString(pw, line); err != nil {
				return
			}
		}
		<-ctx.Done()
		pw.CloseWithError(ctx.Err())
	}()
	return pr, nil
}

// quietSource is a running pod that prints nothing.
type quietSource struct{}

func (quietSource) Status(context.Context) (live.Status, error) {
	return live.Status{Started: true}, nil
}

func (quietSource) Open(ctx context.Context, _ time.Time, _ bool) (io.ReadCloser, error) {
	pr, pw := io.Pipe()
	context.AfterFunc(ctx, func() { pw.CloseWithError(ctx.Err()) })
	return pr, nil
}

// withLive gives s a profile whose [live] section is profile's defaults
// edited by edit.
func withLive(s *Server, edit func(*profile.Live)) {
	p := profile.Default()
	edit(&p.Live)
	s.Profile = profile.NewCurrent(&p)
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// R-B1: a client that opens a live log of a pod printing long lines and
// stops reading is cut by the write deadline of a flush ([live]
// write_timeout): its handler ends, its viewer leaves (the last one, so the
// stream closes) and what it held is freed; the cut is counted.
func TestLiveLogClientThatStopsReadingIsCut(t *testing.T) {
	s, srv := newLogServer(t, quietSource{})
	withLive(s, func(l *profile.Live) { l.WriteTimeout.Duration = 200 * time.Millisecond })
	// A queue that never fills, so that only the deadline can end the
	// stream; 500 lines of 60 KB are more than the kernel buffers between
	// server and client hold.
	d := profile.Default()
	hub, err := live.NewHub(func(live.Key) live.Source { return floodSource{lines: 500} }, live.Options{Buffer: 1000, BufferBytes: 1 << 30,
		History: d.Live.History, HistoryBytes: d.Live.HistoryBytes, ReadRate: 1 << 40, Poll: 10 * time.Millisecond, Retry: fleet.RetryPolicy(d.Reconcile)})
	if err != nil {
		t.Fatal(err)
	}
	s.Live = hub
	addRow(t, s, "turn-flood", store.StateRunning, 0, "")
	cuts := testutil.ToFloat64(metrics.BudgetRefusals.WithLabelValues(budgetWriteTimeout))

	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4 << 10) // fill up soon: the client never reads past the headers
	}
	fmt.Fprintf(conn, "GET /api/pods/turn-flood/logs HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n")
	status, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || !strings.Contains(status, " 200 ") {
		t.Fatalf("status line %q, %v; want 200", status, err)
	}
	waitUntil(t, "the stream to open", func() bool { return s.Live.Streams() == 1 })
	waitUntil(t, "the client that stopped reading to be cut", func() bool {
		return s.Live.Streams() == 0 && s.Live.Held() == 0
	})
	waitUntil(t, "the cut to be counted", func() bool {
		return testutil.ToFloat64(metrics.BudgetRefusals.WithLabelValues(budgetWriteTimeout)) == cuts+1
	})
	s.budgets.mu.Lock()
	defer s.budgets.mu.Unlock()
	if s.budgets.viewers.open != 0 {
		t.Errorf("%d stream slots held after the cut, want 0", s.budgets.viewers.open)
	}
}

// openStream opens pod's live log as the caller of token and returns the
// answer; the stream stays open until ctx ends.
func openStream(t *testing.T, ctx context.Context, url, pod, token string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/api/pods/"+pod+"/logs", nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// lockedBuffer is a log sink safe for the handlers' goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) lines(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), substr)
}

// R-B1: live-log streams are capped per caller and in all; one past a cap
// is 429 with Retry-After naming the cap; a stream that ends frees its
// slot; every refusal is counted and logged once per caller and minute,
// never with the token.
func TestLiveLogStreamCaps(t *testing.T) {
	s, srv := newLogServer(t, quietSource{})
	withLive(s, func(l *profile.Live) { l.MaxViewers, l.MaxViewersPerIdentity = 3, 2 })
	s.Authn = fakeAuthn{"tok-alice": "alice", "tok-bob": "bob", "tok-carol": "carol"}
	s.Authz = apiauth.AllowAll{}
	var logs lockedBuffer
	s.Log = slog.New(slog.NewTextHandler(&logs, nil))
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s.budgets.now = func() time.Time { return now }
	addRow(t, s, "turn-quiet", store.StateRunning, 0, "")
	refusals := func(budget string) float64 { return testutil.ToFloat64(metrics.BudgetRefusals.WithLabelValues(budget)) }
	perIdentity, all := refusals(budgetViewersPerIdentity), refusals(budgetViewers)

	type answer struct {
		Code       int
		RetryAfter string
		Mentions   bool
	}
	get := func(ctx context.Context, token, cap string) answer {
		resp := openStream(t, ctx, srv.URL, "turn-quiet", token)
		body := ""
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			body = string(b)
		}
		return answer{resp.StatusCode, resp.Header.Get("Retry-After"), cap == "" || strings.Contains(body, cap)}
	}
	ok := answer{Code: 200, Mentions: true}
	refused := answer{Code: 429, RetryAfter: "30", Mentions: true}
	first, closeFirst := context.WithCancel(t.Context())
	defer closeFirst()
	got := []answer{
		get(first, "tok-alice", ""),
		get(t.Context(), "tok-alice", ""),
		get(t.Context(), "tok-alice", "max_viewers_per_identity is 2"),
		get(t.Context(), "tok-alice", "max_viewers_per_identity is 2"),
		get(t.Context(), "tok-bob", ""),
		get(t.Context(), "tok-carol", "max_viewers is 3"),
	}
	if diff := cmp.Diff([]answer{ok, ok, refused, refused, ok, refused}, got); diff != "" {
		t.Errorf("answers (-want +got):\n%s", diff)
	}
	if n := logs.lines("budget=live_viewers_per_identity caller=alice"); n != 1 {
		t.Errorf("alice's two refusals logged %d times within the minute, want once", n)
	}
	now = now.Add(time.Minute)
	if a := get(t.Context(), "tok-alice", "max_viewers_per_identity is 2"); a != refused {
		t.Errorf("alice a minute later: %+v, want 429", a)
	}
	if n := logs.lines("budget=live_viewers_per_identity caller=alice"); n != 2 {
		t.Errorf("alice's refusal a minute later logged %d times in all, want 2", n)
	}
	closeFirst()
	waitUntil(t, "the first stream's slot to be freed", func() bool {
		s.budgets.mu.Lock()
		defer s.budgets.mu.Unlock()
		return s.budgets.viewers.open == 2
	})
	if a := get(t.Context(), "tok-carol", ""); a != ok {
		t.Errorf("carol after a stream ended: %+v, want 200", a)
	}
	if d := refusals(budgetViewersPerIdentity) - perIdentity; d != 3 {
		t.Errorf("per-identity refusals counted %v, want 3", d)
	}
	if d := refusals(budgetViewers) - all; d != 1 {
		t.Errorf("refusals of the cap in all counted %v, want 1", d)
	}
	if n := logs.lines("tok-"); n != 0 {
		t.Errorf("a token appears %d times in the log", n)
	}
}

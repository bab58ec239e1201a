package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/profile"
)

// Issue 23, finding 1 (R-B1): one pod prints 30,000 lines of 64 KiB (1.9
// GiB) while two viewers watch it, one reading a byte a second and one not
// reading at all. The controller's RSS stays under 300 MiB throughout (the
// live log's budgets are bytes: [live] history_bytes, viewer_buffer_bytes,
// write_timeout), a viewer of another pod keeps receiving, and the stored
// log is the pod's first bytes up to [pods] max_log_bytes, ending in the line
// that says where it was cut.
func TestLiveLogLongLinesStayWithinBudget(t *testing.T) {
	const lines, lineBytes, rssLimitMiB = 30000, 64 << 10, 300
	s := sharedStack(t)
	pid := s.Processes()["crucible-controller"]
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	g := newGate(t)

	// The other pod prints a line every 50 ms until the test ends.
	other := gatedPod(t, s, "wharf", g, `i=0; while true; do echo "other $i"; i=$((i+1)); sleep 0.05; done`)
	// Line i is its number in 8 digits, then x's, lineBytes with its newline.
	flood := gatedPod(t, s, "wharf", g, awaitGate("go")+fmt.Sprintf(
		`awk 'BEGIN { s = "x"; while (length(s) < %d) s = s s; s = substr(s, 1, %d); for (i = 1; i <= %d; i++) print sprintf("%%08d", i) s }'; touch "$G/printed"`,
		lineBytes-9, lineBytes-9, lines))
	waitRunning(t, s, other.ID)
	waitRunning(t, s, flood.ID)

	otherViews, otherWG := startViewers(t, ctx, s, other.ID, 1)
	defer otherWG.Wait()
	defer cancel()
	waitAll(t, "got the other pod's first line", time.Minute, otherViews, func(v *sseView) bool { return v.lines() >= 1 })
	slow := rawViewer(t, ctx, s, flood.ID, time.Second)
	stuck := rawViewer(t, ctx, s, flood.ID, 0)
	defer slow.Close()
	defer stuck.Close()

	var peak atomic.Int64 // KiB
	sampled := make(chan struct{})
	stopSampling := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			peak.Store(max(peak.Load(), int64(rssMiB(t, pid)*1024)))
			select {
			case <-stopSampling:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	before := otherViews[0].lines()
	g.open(t, "go")
	g.waitFor(t, "printed", 3*time.Minute)
	waitState(t, s, flood.ID, "succeeded", time.Minute)
	during := otherViews[0].lines() - before
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		return getPod(t, s, flood.ID).LogCollected, nil
	})
	close(stopSampling)
	<-sampled
	if err != nil {
		t.Fatalf("the flood pod's log was never collected")
	}
	t.Logf("controller RSS peak %.0f MiB; the other pod's viewer got %d lines while the flood ran", float64(peak.Load())/1024, otherViews[0].lines()-before)
	if p := float64(peak.Load()) / 1024; p >= rssLimitMiB {
		t.Errorf("controller RSS peaked at %.0f MiB while the pod printed, want under %d MiB", p, rssLimitMiB)
	}
	if v := otherViews[0]; during < 1 || v.err != "" {
		t.Errorf("the other pod's viewer got %d lines while the flood ran (error %q), want it to keep receiving", during, v.err)
	}
	checkCutLog(t, s, flood.ID, lineBytes)
}

// checkCutLog checks the stored log of id is the flood's first bytes, cut
// at the shared stack's [pods] max_log_bytes (package profile's default) with its
// line saying so.
func checkCutLog(t *testing.T, s *devstack.Stack, id string, lineBytes int) {
	t.Helper()
	code, stored := apiCall(t, s, "GET", "/api/pods/"+id+"/artifacts/log", nil)
	if code != 200 {
		t.Fatalf("stored log: %d", code)
	}
	limit := profile.DefaultMaxLogBytes
	mark := fmt.Sprintf("[crucible: log cut at %d bytes ([pods] max_log_bytes); the rest was not stored]\n", limit)
	keep := limit - len(mark) - 1
	var want bytes.Buffer
	for i := 1; want.Len() < keep; i++ {
		fmt.Fprintf(&want, "%08d%s\n", i, strings.Repeat("x", lineBytes-9))
	}
	want.Truncate(keep)
	want.WriteString("\n" + mark)
	if len(stored) > limit {
		t.Errorf("stored log is %d bytes, over max_log_bytes %d", len(stored), limit)
	}
	if !bytes.Equal(stored, want.Bytes()) {
		n := 0
		for n < min(len(stored), want.Len()) && stored[n] == want.Bytes()[n] {
			n++
		}
		t.Errorf("stored log (%d bytes) differs from the pod's first %d bytes and the cut line from byte %d; it ends %q",
			len(stored), keep, n, stored[max(0, len(stored)-120):])
	}
}

// rawConn is an SSE viewer on a bare connection that reads a byte every
// `every`, or never when every is 0.
type rawConn struct {
	conn net.Conn
	once sync.Once
}

func (c *rawConn) Close() { c.once.Do(func() { c.conn.Close() }) }

func rawViewer(t *testing.T, ctx context.Context, s *devstack.Stack, id string, every time.Duration) *rawConn {
	t.Helper()
	u, err := url.Parse(s.Federation.ControllerInternalURL)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	c := &rawConn{conn: conn}
	context.AfterFunc(ctx, c.Close)
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4 << 10)
	}
	fmt.Fprintf(conn, "GET /api/pods/%s/logs HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\n\r\n", id, u.Host)
	br := bufio.NewReaderSize(conn, 16)
	status, err := br.ReadString('\n')
	if err != nil || !strings.Contains(status, " 200 ") {
		t.Fatalf("viewer of %s: status line %q, %v; want 200", id, status, err)
	}
	if every > 0 {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-time.After(every):
				}
				if _, err := br.ReadByte(); err != nil {
					return // cut by the controller, as it should be
				}
			}
		}()
	}
	return c
}

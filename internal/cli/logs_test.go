package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// sseServer answers each connection with conns[n] (the last one repeats),
// recording the Last-Event-ID each connection carried.
type sseServer struct {
	mu    sync.Mutex
	conns []func(w http.ResponseWriter)
	ids   []string
}

func (s *sseServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	n := len(s.ids)
	s.ids = append(s.ids, r.Header.Get("Last-Event-ID"))
	s.mu.Unlock()
	if r.Header.Get("Accept") != "text/event-stream" || r.URL.Path != "/api/pods/turn-1/logs" {
		http.Error(w, "bad request", 400)
		return
	}
	s.conns[min(n, len(s.conns)-1)](w)
}

func events(evs ...string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		for _, e := range evs {
			io.WriteString(w, e+"\n\n")
			w.(http.Flusher).Flush()
		}
	}
}

func lineEv(n int, text string) string {
	return fmt.Sprintf("id: %d\nevent: line\ndata: {\"ts\":\"2026-11-30T04:00:00Z\",\"text\":%q}", n, text)
}

func follow(t *testing.T, s *sseServer) (string, string, error) {
	t.Helper()
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	var out, errOut bytes.Buffer
	err := Run(t.Context(), []string{"logs", "-f", "--server", srv.URL, "turn-1"}, &out, &errOut)
	return out.String(), errOut.String(), err
}

func TestLogsFollowResumesAfterACut(t *testing.T) {
	s := &sseServer{conns: []func(http.ResponseWriter){
		events(": hello", lineEv(1, "one"), lineEv(2, "two")), // then the connection ends
		events(`event: error` + "\n" + `data: {"error":"viewer too slow: dropped; reconnect with Last-Event-ID"}`),
		events(lineEv(3, "three"), "event: end\ndata: {\"state\":\"succeeded\",\"exit_code\":0}"),
	}}
	out, errOut, err := follow(t, s)
	if err != nil {
		t.Fatal(err)
	}
	if out != "one\ntwo\nthree\n" {
		t.Errorf("out %q", out)
	}
	if !strings.Contains(errOut, "turn-1: succeeded (exit code 0)") {
		t.Errorf("stderr %q", errOut)
	}
	if got := strings.Join(s.ids, ","); got != ",2,2" {
		t.Errorf("Last-Event-IDs %q, want \",2,2\"", got)
	}
}

func TestLogsFollowFailedPod(t *testing.T) {
	s := &sseServer{conns: []func(http.ResponseWriter){
		events(lineEv(1, "boom"), "event: end\ndata: {\"state\":\"failed\",\"exit_code\":3,\"reason\":\"Error\"}"),
	}}
	out, _, err := follow(t, s)
	if out != "boom\n" || err == nil || !strings.Contains(err.Error(), "failed (exit code 3): Error") {
		t.Errorf("out %q err %v", out, err)
	}
}

func TestLogsFollowRefusals(t *testing.T) {
	cases := map[string]func(http.ResponseWriter){
		"404":             func(w http.ResponseWriter) { http.Error(w, `{"error":"work pod \"turn-1\" not found"}`, 404) },
		"malformed line":  events("id: 1\nevent: line\ndata: {not json"),
		"malformed end":   events("event: end\ndata: [1]"),
		"oversized field": events("data: " + strings.Repeat("x", maxEventBytes+1)),
	}
	for name, conn := range cases {
		t.Run(name, func(t *testing.T) {
			s := &sseServer{conns: []func(http.ResponseWriter){conn}}
			done := make(chan error, 1)
			go func() { _, _, err := follow(t, s); done <- err }()
			select {
			case err := <-done:
				if err == nil {
					t.Error("no error")
				}
			case <-time.After(20 * time.Second):
				t.Fatal("still retrying a permanent failure")
			}
		})
	}
}

func TestLogsFollowInterrupted(t *testing.T) {
	block := make(chan struct{})
	s := &sseServer{conns: []func(http.ResponseWriter){func(w http.ResponseWriter) {
		events(lineEv(1, "running"))(w)
		<-block
	}}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	defer close(block) // before Close waits for the handler
	ctx, cancel := context.WithCancel(t.Context())
	pr, pw := io.Pipe()
	go func() {
		buf := make([]byte, 64)
		_, _ = pr.Read(buf) // the first line arrived: press Ctrl-C
		cancel()
		_, _ = io.Copy(io.Discard, pr)
	}()
	err := Run(ctx, []string{"logs", "-f", "--server", srv.URL, "turn-1"}, pw, io.Discard)
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != ExitInterrupted || !errors.Is(err, context.Canceled) {
		t.Errorf("err %v, want exit %d", err, ExitInterrupted)
	}
}

package api

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/dispatch"
	"crucible.dev/crucible/internal/fleet"
	"crucible.dev/crucible/internal/live"
	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/store"
	"crucible.dev/crucible/internal/store/storetest"
)

// fixedSource is a running pod whose log is lines, then it finishes.
type fixedSource struct{ lines []string }

func (f fixedSource) Status(context.Context) (live.Status, error) {
	return live.Status{Started: true, Finished: true}, nil
}

func (f fixedSource) Open(_ context.Context, _ time.Time, _ bool) (io.ReadCloser, error) {
	return io.NopCloser(strings.NewReader(strings.Join(f.lines, "\n") + "\n")), nil
}

func newLogServer(t *testing.T, src live.Source) (*Server, *httptest.Server) {
	t.Helper()
	s := New(Options{Store: storetest.SQLite(t), Artifacts: &fakeArtifacts{}, Log: slog.New(slog.DiscardHandler), MaxRequestBytes: 1 << 20, AllowedHosts: profile.DefaultAPIAllowedHosts()})
	d := profile.Default()
	hub, err := live.NewHub(func(live.Key) live.Source { return src },
		live.Options{Buffer: d.Live.Buffer, BufferBytes: d.Live.ViewerBufferBytes, History: d.Live.History, HistoryBytes: d.Live.HistoryBytes,
			ReadRate: d.Live.ReadBytesPerSecond, Poll: 10 * time.Millisecond, Retry: fleet.RetryPolicy(d.Reconcile), Render: renderLine})
	if err != nil {
		t.Fatal(err)
	}
	s.Live = hub
	mux := http.NewServeMux()
	s.Routes(mux)
	srv := httptest.NewUnstartedServer(mux)
	// As the controller's listener: a stream outlives ReadTimeout.
	srv.Config.ReadTimeout = 300 * time.Millisecond
	srv.Start()
	t.Cleanup(srv.Close)
	return s, srv
}

func addRow(t *testing.T, s *Server, id string, state store.State, exit int32, log string) {
	t.Helper()
	row := store.WorkPod{ID: id, Cluster: "wharf", Namespace: "loops", Kind: "turn", State: store.StateRunning}
	if _, err := s.Store.CreateWorkPod(t.Context(), row); err != nil {
		t.Fatal(err)
	}
	if log != "" {
		digest := fmt.Sprintf("%x", sha256.Sum256([]byte(log)))
		s.Artifacts.(*fakeArtifacts).put(id, "log", digest, []byte(log))
		a := store.Artifact{PodID: id, Kind: "log", Size: int64(len(log)), SHA256: digest, Source: store.SourceController}
		if _, err := s.Store.(store.Store).PutArtifact(t.Context(), a, store.Quota{}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := s.Store.UpdateWorkPod(t.Context(), id, func(p *store.WorkPod) error {
		p.State = state
		if state.Terminal() {
			now := time.Now().UTC()
			p.ExitCode, p.FinishedAt, p.LogCollected = &exit, &now, log != ""
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func getLogs(t *testing.T, srv *httptest.Server, id string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/api/pods/"+id+"/logs", nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

// events parses an SSE body into "event id data" strings.
func events(body string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(body))
	var ev, id, data string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if ev != "" {
				out = append(out, strings.Join(strings.Fields(ev+" "+id), " ")+" "+data)
			}
			ev, id, data = "", "", ""
		case strings.HasPrefix(line, "event: "):
			ev = line[7:]
		case strings.HasPrefix(line, "id: "):
			id = line[4:]
		case strings.HasPrefix(line, "data: "):
			data = line[6:]
		}
	}
	return out
}

var sse = map[string]string{"Accept": "text/event-stream"}

func TestLogsReplayFinishedPod(t *testing.T) {
	s, srv := newLogServer(t, fixedSource{})
	addRow(t, s, "turn-done", store.StateFailed, 3, "one\ntwo\nthree\n")
	resp, body := getLogs(t, srv, "turn-done", sse)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("%d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	want := []string{`line 1 {"text":"one"}`, `line 2 {"text":"two"}`, `line 3 {"text":"three"}`, `end {"state":"failed","exit_code":3}`}
	if diff := cmp.Diff(want, events(body)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	_, body = getLogs(t, srv, "turn-done", map[string]string{"Accept": "text/event-stream", "Last-Event-ID": "2"})
	if diff := cmp.Diff(want[2:], events(body)); diff != "" {
		t.Errorf("resumed after 2 (-want +got):\n%s", diff)
	}
	resp, body = getLogs(t, srv, "turn-done", nil)
	if resp.StatusCode != 200 || body != "one\ntwo\nthree\n" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Errorf("plain: %d %q %s", resp.StatusCode, body, resp.Header.Get("Content-Type"))
	}
}

func TestLogsLivePod(t *testing.T) {
	s, srv := newLogServer(t, fixedSource{lines: []string{
		"2026-11-30T04:00:00.1Z hello", "2026-11-30T04:00:00.1Z hello", `2026-11-30T04:00:01Z "quoted"`,
	}})
	addRow(t, s, "turn-live", store.StateRunning, 0, "")
	go func() {
		time.Sleep(time.Second) // past the server's ReadTimeout
		addLater := func(p *store.WorkPod) error {
			now := time.Now().UTC()
			p.State, p.ExitCode, p.FinishedAt = store.StateSucceeded, new(int32), &now
			return nil
		}
		_, _ = s.Store.UpdateWorkPod(context.Background(), "turn-live", addLater)
	}()
	resp, body := getLogs(t, srv, "turn-live", sse)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	want := []string{
		`line 1 {"ts":"2026-11-30T04:00:00.1Z","text":"hello"}`,
		`line 2 {"ts":"2026-11-30T04:00:00.1Z","text":"hello"}`,
		`line 3 {"ts":"2026-11-30T04:00:01Z","text":"\"quoted\""}`,
		`end {"state":"succeeded","exit_code":0}`,
	}
	if diff := cmp.Diff(want, events(body)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestLogsRefuses(t *testing.T) {
	s, srv := newLogServer(t, fixedSource{})
	addRow(t, s, "turn-run", store.StateRunning, 0, "")
	addRow(t, s, "turn-lost", store.StateLost, 0, "")
	cases := []struct {
		name, pod string
		hdr       map[string]string
		want      int
	}{
		{"unknown pod", "turn-nope", sse, 404},
		{"running pod as text", "turn-run", nil, 406},
		{"running pod, Accept json", "turn-run", map[string]string{"Accept": "application/json"}, 406},
		{"event-stream with q=0", "turn-run", map[string]string{"Accept": "text/event-stream;q=0"}, 406},
		{"finished pod without a log, as text", "turn-lost", nil, 404},
		{"Last-Event-ID not a number", "turn-run", map[string]string{"Accept": "text/event-stream", "Last-Event-ID": "abc"}, 400},
		{"Last-Event-ID negative", "turn-run", map[string]string{"Accept": "text/event-stream", "Last-Event-ID": "-1"}, 400},
		{"Last-Event-ID oversized", "turn-run", map[string]string{"Accept": "text/event-stream", "Last-Event-ID": strings.Repeat("9", 400)}, 400},
		{"Last-Event-ID with a newline", "turn-run", map[string]string{"Accept": "text/event-stream", "Last-Event-ID": "1 2"}, 400},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := getLogs(t, srv, tc.pod, tc.hdr)
			if resp.StatusCode != tc.want {
				t.Errorf("%d %s, want %d", resp.StatusCode, body, tc.want)
			}
		})
	}
}

func TestAcceptsEventStream(t *testing.T) {
	cases := map[string]bool{
		"text/event-stream": true, "text/html, text/event-stream;q=0.5": true, "TEXT/EVENT-STREAM": true,
		"": false, "*/*": false, "text/event-stream;q=0": false, "text/event-stream;q=x": false, ";;;": false,
	}
	for in, want := range cases {
		if got := acceptsEventStream([]string{in}); got != want {
			t.Errorf("%q: %v, want %v", in, got, want)
		}
	}
}

// settlerFunc is a Settler of a test.
type settlerFunc func(ctx context.Context, id string) (store.WorkPod, error)

func (f settlerFunc) Settle(ctx context.Context, id string) (store.WorkPod, error) { return f(ctx, id) }

// A live log that ends is answered with how the pod ended as its spoke
// tells (the Settler), whatever the row said when the log ended; a pod
// still live is reported live and said so; a spoke that cannot tell ends
// the stream with an error, never with a live state taken for an end.
func TestLogsEndSettlesTheRow(t *testing.T) {
	code := int32(7)
	forbidden := fmt.Errorf("get pod: %w", apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "turn-end", errors.New("no get")))
	failed := store.WorkPod{ID: "turn-end", Cluster: "wharf", State: store.StateFailed, ExitCode: &code, Reason: "Error"}
	for _, tc := range []struct {
		name   string
		settle func(calls int) (store.WorkPod, error)
		want   string
	}{
		{"finished", func(int) (store.WorkPod, error) { return failed, nil }, `end {"state":"failed","exit_code":7,"reason":"Error"}`},
		{"finished on the second read", func(calls int) (store.WorkPod, error) {
			if calls == 1 {
				return store.WorkPod{ID: "turn-end", Cluster: "wharf", State: store.StateRunning}, nil
			}
			return failed, nil
		}, `end {"state":"failed","exit_code":7,"reason":"Error"}`},
		{"spoke unreachable for a moment", func(calls int) (store.WorkPod, error) {
			if calls == 1 {
				return store.WorkPod{}, fmt.Errorf("get pod: %w", syscall.ECONNREFUSED)
			}
			return failed, nil
		}, `end {"state":"failed","exit_code":7,"reason":"Error"}`},
		{"spoke refuses", func(int) (store.WorkPod, error) { return store.WorkPod{}, forbidden }, "error " + mustJSON(t, apiv1.ErrorEvent{Error: "the log ended; how the pod ended could not be read from wharf: " + dispatch.PublicMessage(forbidden)})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, srv := newLogServer(t, fixedSource{lines: []string{"2026-11-30T04:00:00Z bye"}})
			addRow(t, s, "turn-end", store.StateRunning, 0, "")
			calls := 0
			s.Settler = settlerFunc(func(ctx context.Context, id string) (store.WorkPod, error) {
				calls++
				if id != "turn-end" {
					t.Errorf("settled %q, want turn-end", id)
				}
				return tc.settle(calls)
			})
			_, body := getLogs(t, srv, "turn-end", sse)
			got := events(body)
			if diff := cmp.Diff([]string{`line 1 {"ts":"2026-11-30T04:00:00Z","text":"bye"}`, tc.want}, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"crucible.dev/crucible/internal/api"
	"crucible.dev/crucible/internal/cli"
	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
)

// sseView is what one SSE viewer of a pod's log received.
type sseView struct {
	mu    sync.Mutex
	ns    []int64
	texts []string
	ts    []time.Time // each line's timestamp, as the runtime wrote it
	at    []time.Time // arrival of each line
	end   *api.EndEvent
	err   string // an error event, or the transport's error
}

func (v *sseView) lines() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.texts)
}

func (v *sseView) done() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.end != nil || v.err != ""
}

// view reads GET /api/pods/{id}/logs as SSE into v until the stream ends.
func (v *sseView) view(ctx context.Context, s *devstack.Stack, id string) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.Federation.ControllerInternalURL+"/api/pods/"+id+"/logs", nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := sseClient.Do(req)
	if err != nil {
		v.fail(err.Error())
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		v.fail(resp.Status)
		return
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	var event, eventID, data string
	for sc.Scan() {
		line := sc.Text()
		if line != "" {
			f, val, _ := strings.Cut(line, ": ")
			switch f {
			case "event":
				event = val
			case "id":
				eventID = val
			case "data":
				data = val
			}
			continue
		}
		v.mu.Lock()
		switch event {
		case "line":
			var l api.LineEvent
			_ = json.Unmarshal([]byte(data), &l)
			n, _ := strconv.ParseInt(eventID, 10, 64)
			ts, _ := time.Parse(time.RFC3339Nano, l.TS)
			v.ns, v.texts, v.at, v.ts = append(v.ns, n), append(v.texts, l.Text), append(v.at, time.Now()), append(v.ts, ts)
		case "end":
			var e api.EndEvent
			_ = json.Unmarshal([]byte(data), &e)
			v.end = &e
		case "error":
			v.err = data
		}
		stop := v.end != nil || v.err != ""
		v.mu.Unlock()
		if stop {
			return
		}
		event, eventID, data = "", "", ""
	}
	v.fail(fmt.Sprintf("stream ended without an end event (%v)", sc.Err()))
}

func (v *sseView) fail(msg string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.err == "" {
		v.err = msg
	}
}

// sseClient has no timeout and room for hundreds of connections.
var sseClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1000}}

// startViewers opens n SSE viewers of pod id.
func startViewers(t testing.TB, ctx context.Context, s *devstack.Stack, id string, n int) ([]*sseView, *sync.WaitGroup) {
	t.Helper()
	views := make([]*sseView, n)
	var wg sync.WaitGroup
	for i := range views {
		views[i] = &sseView{}
		wg.Go(func() { views[i].view(ctx, s, id) })
	}
	return views, &wg
}

func waitAll(t testing.TB, what string, within time.Duration, views []*sseView, cond func(*sseView) bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, within, true, func(context.Context) (bool, error) {
		for _, v := range views {
			if !cond(v) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		for i, v := range views {
			if !cond(v) {
				t.Fatalf("viewer %d: never %s (lines %d, err %q)", i, what, v.lines(), v.err)
			}
		}
	}
}

// logStreams is the number of pods/log requests open at the spoke's API
// server now (log is a long-running subresource, so it has a gauge).
func logStreams(t testing.TB, spoke *devstack.Cluster) int {
	t.Helper()
	return apiserverMetric(t, spoke, "apiserver_longrunning_requests", `resource="pods"`, `subresource="log"`)
}

func logRequests(t testing.TB, spoke *devstack.Cluster) int {
	t.Helper()
	return apiserverMetric(t, spoke, "apiserver_request_total", `resource="pods"`, `subresource="log"`)
}

// checkViews checks every viewer got want, numbered 1..len(want), and the end.
func checkViews(t *testing.T, views []*sseView, want []string, state string) {
	t.Helper()
	bad := 0
	for i, v := range views {
		v.mu.Lock()
		ok := v.err == "" && v.end != nil && string(v.end.State) == state && len(v.texts) == len(want)
		for j := 0; ok && j < len(want); j++ {
			ok = v.texts[j] == want[j] && v.ns[j] == int64(j+1)
		}
		if !ok && bad < 3 {
			t.Errorf("viewer %d: %d lines (want %d), end %+v, err %q; first lines %q", i, len(v.texts), len(want), v.end, v.err, head(v.texts))
		}
		if !ok {
			bad++
		}
		v.mu.Unlock()
	}
	if bad > 0 {
		t.Errorf("%d of %d viewers did not get every line exactly once, in order", bad, len(views))
	}
}

func head(s []string) []string { return s[:min(len(s), 5)] }

func servedLines(t *testing.T, spoke *devstack.Cluster) []string {
	t.Helper()
	return strings.Split(strings.TrimSuffix(servedLog(t, spoke), "\n"), "\n")
}

func appendLines(t testing.TB, spoke *devstack.Cluster, prefix string, n int) {
	t.Helper()
	for i := range n {
		if err := spoke.AppendPodLog(fmt.Sprintf("%s %d", prefix, i)); err != nil {
			t.Fatal(err)
		}
	}
}

func cancelPod(t testing.TB, s *devstack.Stack, id string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, s.Federation.ControllerInternalURL+"/api/pods/"+id+"/cancel", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

// 200 viewers of one running pod share one upstream log stream at the spoke;
// each gets every line, in order, and the end.
func TestLiveLog200ViewersOneUpstream(t *testing.T) {
	s := devstacktest.Shared(t)
	wharf := s.Spoke("wharf")
	p := workPodOn(t, s, "wharf")
	waitRunning(t, s, p.ID)
	if err := wharf.AppendPodLog("live: before the viewers"); err != nil {
		t.Fatal(err)
	}
	before := logRequests(t, wharf)
	views, wg := startViewers(t, t.Context(), s, p.ID, 200)
	appendLines(t, wharf, "live: line", 30)
	want := servedLines(t, wharf)
	waitAll(t, "got the lines", time.Minute, views, func(v *sseView) bool { return v.lines() == len(want) })
	if n := logStreams(t, wharf); n != 1 {
		t.Errorf("%d pods/log streams open at the spoke for 200 viewers, want 1", n)
	}
	cancelPod(t, s, p.ID)
	wg.Wait()
	checkViews(t, views, want, "cancelled")
	// The follow stream, plus one read of the finished log; no more.
	if n := logRequests(t, wharf) - before; n > 2 {
		t.Errorf("%d pods/log requests at the spoke for 200 viewers, want at most 2 (one follow, one final read)", n)
	}
}

// The spoke's API server restarts while 50 viewers follow a pod: each still
// gets every line exactly once.
func TestLiveLogSurvivesSpokeRestart(t *testing.T) {
	s := devstacktest.Shared(t)
	wharf := s.Spoke("wharf")
	p := workPodOn(t, s, "wharf")
	waitRunning(t, s, p.ID)
	views, wg := startViewers(t, t.Context(), s, p.ID, 50)
	appendLines(t, wharf, "restart: before", 10)
	first := len(servedLines(t, wharf))
	waitAll(t, "got the first lines", time.Minute, views, func(v *sseView) bool { return v.lines() == first })
	if err := s.StopAPIServer(wharf); err != nil {
		t.Fatal(err)
	}
	appendLines(t, wharf, "restart: during", 10)
	if err := s.StartAPIServer(t.Context(), wharf); err != nil {
		t.Fatal(err)
	}
	appendLines(t, wharf, "restart: after", 10)
	want := servedLines(t, wharf)
	waitAll(t, "got every line", 2*time.Minute, views, func(v *sseView) bool { return v.lines() >= len(want) || v.done() })
	cancelPod(t, s, p.ID)
	wg.Wait()
	checkViews(t, views, want, "cancelled")
}

// A finished pod's stream replays its stored log and ends with its state;
// Last-Event-ID resumes after that line.
func TestLiveLogReplaysFinishedPod(t *testing.T) {
	s := devstacktest.Shared(t)
	wharf := s.Spoke("wharf")
	if err := wharf.AppendPodLog("replay: one", "replay: two"); err != nil {
		t.Fatal(err)
	}
	wp := submit(t, s, api.SubmitRequest{Image: "x", Annotations: quick("1s")})
	waitState(t, s, wp.ID, "succeeded", time.Minute)
	err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return getPod(t, s, wp.ID).LogCollected, nil
	})
	if err != nil {
		t.Fatal("log never collected")
	}
	_, stored := apiCall(t, s, http.MethodGet, "/api/pods/"+wp.ID+"/artifacts/log", nil)
	want := strings.Split(strings.TrimSuffix(string(stored), "\n"), "\n")
	views, wg := startViewers(t, t.Context(), s, wp.ID, 3)
	wg.Wait()
	checkViews(t, views, want, "succeeded")
	if e := views[0].end; e != nil && (e.ExitCode == nil || *e.ExitCode != 0) {
		t.Errorf("end %+v, want exit code 0", e)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, s.Federation.ControllerInternalURL+"/api/pods/"+wp.ID+"/logs", nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Last-Event-ID", strconv.Itoa(len(want)-1))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var ids []string
	for sc.Scan() {
		if id, ok := strings.CutPrefix(sc.Text(), "id: "); ok {
			ids = append(ids, id)
		}
	}
	if strings.Join(ids, ",") != strconv.Itoa(len(want)) {
		t.Errorf("resumed after line %d: ids %v, want only %d", len(want)-1, ids, len(want))
	}
}

func waitRunning(t testing.TB, s *devstack.Stack, id string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		code, body := apiCallTB(t, s, http.MethodGet, "/api/pods/"+id)
		var wp api.WorkPod
		_ = json.Unmarshal(body, &wp)
		return code == 200 && wp.State == "running", nil
	})
	if err != nil {
		t.Fatalf("%s never running", id)
	}
}

func apiCallTB(t testing.TB, s *devstack.Stack, method, path string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, s.Federation.ControllerInternalURL+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		b.WriteString(sc.Text())
	}
	return resp.StatusCode, []byte(b.String())
}

// `crucible logs -f` prints each line while the pod still runs, in order,
// and ends with the pod's end state.
func TestLogsFollowCommand(t *testing.T) {
	s := devstacktest.Shared(t)
	wharf := s.Spoke("wharf")
	p := workPodOn(t, s, "wharf")
	out, errOut := &syncBuffer{}, &syncBuffer{}
	done := make(chan error, 1)
	go func() { // most likely while the pod is still pending: the stream waits
		done <- cli.Run(t.Context(), []string{"logs", "-f", "--server", s.Federation.ControllerInternalURL, p.ID}, out, errOut)
	}()
	waitRunning(t, s, p.ID)
	for _, line := range []string{"follow: first", "follow: second"} {
		if err := wharf.AppendPodLog(line); err != nil {
			t.Fatal(err)
		}
		err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return strings.HasSuffix(out.String(), line+"\n"), nil
		})
		if err != nil {
			t.Fatalf("%q never printed: %q", line, out.String())
		}
		if st := getPod(t, s, p.ID).State; st != "running" {
			t.Fatalf("pod %s before the line was printed", st)
		}
	}
	cancelPod(t, s, p.ID)
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "cancelled") || !strings.Contains(errOut.String(), p.ID+": cancelled") {
			t.Errorf("logs -f ended with %v, stderr %q; want the cancelled state", err, errOut.String())
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("logs -f did not end after the pod did")
	}
	if diff := strings.Join(servedLines(t, wharf), "\n") + "\n"; out.String() != diff {
		t.Errorf("logs -f printed %q, want the whole log %q", out.String(), diff)
	}
}

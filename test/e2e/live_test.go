package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/cli"
	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/workpod"
)

// sseView is what one SSE viewer of a pod's log received.
type sseView struct {
	mu    sync.Mutex
	ns    []int64
	texts []string
	ts    []time.Time // each line's timestamp, as the runtime wrote it
	at    []time.Time // arrival of each line
	end   *apiv1.EndEvent
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

// view reads GET /api/pods/{id}/logs of the API at base as SSE into v
// until the stream ends.
func (v *sseView) view(ctx context.Context, base, id string) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/pods/"+id+"/logs", nil)
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
			var l apiv1.LineEvent
			_ = json.Unmarshal([]byte(data), &l)
			n, _ := strconv.ParseInt(eventID, 10, 64)
			ts, _ := time.Parse(time.RFC3339Nano, l.TS)
			v.ns, v.texts, v.at, v.ts = append(v.ns, n), append(v.texts, l.Text), append(v.at, time.Now()), append(v.ts, ts)
		case "end":
			var e apiv1.EndEvent
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
		wg.Go(func() { views[i].view(ctx, s.Federation.ControllerInternalURL, id) })
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

// podLogRequests is the number of pods/log requests for one pod that the
// spoke's API server made to its kubelet (the dev runtime) so far: other
// tests' pods do not count.
func podLogRequests(t testing.TB, s *devstack.Stack, spoke *devstack.Cluster, pod string) int {
	t.Helper()
	n, err := s.PodLogRequests(spoke, devstack.SpokeNamespace, pod)
	if err != nil {
		t.Fatal(err)
	}
	return n
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

// gate is a directory the test and its pods share (pods run as nobody):
// the test creates a file in it to let a pod go on, so that what the pod
// prints happens at a point the test chose, with no timing involved.
type gate string

func newGate(t testing.TB) gate {
	t.Helper()
	dir, err := os.MkdirTemp("", "crucible-gate-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return gate(dir)
}

// env is the pod variable that names the gate: G.
func (g gate) env() workpod.EnvVar { return workpod.EnvVar{Name: "G", Value: string(g)} }

// open lets pods waiting for name go on.
func (g gate) open(t testing.TB, name string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(string(g), name), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// waitFor waits until a pod created name in the gate (what a pod does once
// it printed something the test must know about).
func (g gate) waitFor(t testing.TB, name string, within time.Duration) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, within, true, func(context.Context) (bool, error) {
		_, err := os.Stat(filepath.Join(string(g), name))
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("the pod never signalled %s", name)
	}
}

// awaitGate is shell that waits until the gate file $G/name exists.
func awaitGate(name string) string {
	return `until [ -e "$G/` + name + `" ]; do sleep 0.05; done; `
}

// printLines is shell printing "prefix i" for i in from..to, a 50 ms pause
// every ten lines, and want is exactly what it prints.
func printLines(prefix string, from, to int) (sh string, want []string) {
	return printLinesPausing(prefix, from, to, "0.05")
}

// printLinesPausing is printLines pausing pause seconds every ten lines.
func printLinesPausing(prefix string, from, to int, pause string) (sh string, want []string) {
	for i := from; i <= to; i++ {
		want = append(want, fmt.Sprintf("%s %d", prefix, i))
	}
	sh = fmt.Sprintf(`i=%d; while [ $i -le %d ]; do echo "%s $i"; [ $((i %% 10)) -eq 0 ] && sleep %s; i=$((i+1)); done; `, from, to, prefix, pause)
	return sh, want
}

// gatedPod submits a turn on cluster that runs script (with $G the gate) and
// is cancelled when the test ends.
func gatedPod(t *testing.T, s *devstack.Stack, cluster string, g gate, script string) apiv1.WorkPod {
	t.Helper()
	wp := submit(t, s, apiv1.SubmitRequest{Cluster: cluster, Image: "busybox", Command: []string{"sh", "-c", script}, Env: []workpod.EnvVar{g.env()}})
	t.Cleanup(func() { cancelPodQuietly(s, wp.ID) })
	return wp
}

func cancelPod(t testing.TB, s *devstack.Stack, id string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, s.Federation.ControllerInternalURL+"/api/pods/"+id+"/cancel", nil)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(apiv1.ClientHeader, "e2e")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("cancel %s: %s", id, resp.Status)
	}
}

// cancelPodQuietly is cleanup: the pod may have finished already.
func cancelPodQuietly(s *devstack.Stack, id string) {
	req, _ := http.NewRequest(http.MethodPost, s.Federation.ControllerInternalURL+"/api/pods/"+id+"/cancel", nil)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(apiv1.ClientHeader, "e2e")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
}

// 200 viewers of one running pod share one upstream log stream at the spoke;
// each gets every line the pod printed, in order, and the end.
func TestLiveLog200ViewersOneUpstream(t *testing.T) {
	s := sharedStack(t)
	wharf := s.Spoke("wharf")
	g := newGate(t)
	lines, more := printLines("live: line", 1, 30)
	want := append([]string{"live: before the viewers"}, more...)
	p := gatedPod(t, s, "wharf", g, `echo "live: before the viewers"; `+awaitGate("go")+lines+`touch "$G/printed"; sleep 3600`)
	waitRunning(t, s, p.ID)
	views, wg := startViewers(t, t.Context(), s, p.ID, 200)
	waitAll(t, "got the first line", time.Minute, views, func(v *sseView) bool { return v.lines() >= 1 })
	g.open(t, "go")
	g.waitFor(t, "printed", time.Minute)
	waitAll(t, "got the lines", time.Minute, views, func(v *sseView) bool { return v.lines() >= len(want) || v.done() })
	if n := logStreams(t, wharf); n != 1 {
		t.Errorf("%d pods/log streams open at the spoke for 200 viewers, want 1", n)
	}
	if n := podLogRequests(t, s, wharf, p.ID); n != 1 {
		t.Errorf("%d pods/log requests for the pod so far, want the one follow stream", n)
	}
	cancelPod(t, s, p.ID)
	wg.Wait()
	checkViews(t, views, want, "cancelled")
	// The follow stream, perhaps one reconnect (the cancelled process's
	// stream can end before its row says so), and one read of the finished
	// log: never one per viewer.
	if n := podLogRequests(t, s, wharf, p.ID); n > 3 {
		t.Errorf("%d pods/log requests at the spoke for 200 viewers, want at most 3 (follow, one reconnect, final read)", n)
	}
}

// The spoke's API server restarts while 50 viewers follow a pod that prints
// before, during and after the outage: each still gets every line exactly
// once, in order, and the pod's end.
func TestLiveLogSurvivesSpokeRestart(t *testing.T) {
	s := sharedStack(t)
	wharf := s.Spoke("wharf")
	g := newGate(t)
	before, want := printLines("restart: before", 1, 10)
	during, w2 := printLines("restart: during", 1, 10)
	after, w3 := printLines("restart: after", 1, 10)
	want = slices.Concat(want, w2, w3)
	p := gatedPod(t, s, "wharf", g, before+awaitGate("down")+during+`touch "$G/printed-during"; `+awaitGate("up")+after)
	waitRunning(t, s, p.ID)
	views, wg := startViewers(t, t.Context(), s, p.ID, 50)
	waitAll(t, "got the first lines", time.Minute, views, func(v *sseView) bool { return v.lines() >= 10 || v.done() })
	restoreSpokeAfter(t, s, wharf)
	if err := s.StopAPIServer(wharf); err != nil {
		t.Fatal(err)
	}
	g.open(t, "down")
	g.waitFor(t, "printed-during", time.Minute) // printed while the API server was down
	if err := s.StartAPIServer(t.Context(), wharf); err != nil {
		t.Fatal(err)
	}
	g.open(t, "up")
	waitAll(t, "ended", 3*time.Minute, views, func(v *sseView) bool { return v.done() })
	wg.Wait()
	checkViews(t, views, want, "succeeded")
}

// A finished pod's stream replays its stored log, exactly the lines it
// printed, and ends with its state; Last-Event-ID resumes after that line.
func TestLiveLogReplaysFinishedPod(t *testing.T) {
	s := sharedStack(t)
	want := []string{"replay: one", "replay: two"}
	wp := submit(t, s, apiv1.SubmitRequest{Image: "busybox", Command: []string{"sh", "-c", `echo "replay: one"; echo "replay: two"`}})
	waitState(t, s, wp.ID, "succeeded", time.Minute)
	err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return getPod(t, s, wp.ID).LogCollected, nil
	})
	if err != nil {
		t.Fatal("log never collected")
	}
	if _, stored := apiCall(t, s, http.MethodGet, "/api/pods/"+wp.ID+"/artifacts/log", nil); string(stored) != strings.Join(want, "\n")+"\n" {
		t.Fatalf("stored log %q, want %q", stored, want)
	}
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
	var wp apiv1.WorkPod
	// Two minutes: right after a test restarted a spoke's API server, its
	// scheduler and node agents take a while to reconnect on a busy machine.
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		code, body := apiCallTB(t, s, http.MethodGet, "/api/pods/"+id)
		wp = apiv1.WorkPod{}
		_ = json.Unmarshal(body, &wp)
		return code == 200 && wp.State == "running", nil
	})
	if err != nil {
		t.Fatalf("%s never running: state %q, reason %q", id, wp.State, wp.Reason)
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
// and ends with the pod's end state. The pod prints its second line only
// once the test saw the first and the row running, and ends only once it
// saw the second.
func TestLogsFollowCommand(t *testing.T) {
	s := sharedStack(t)
	g := newGate(t)
	p := gatedPod(t, s, "wharf", g, `echo "follow: first"; `+awaitGate("1")+`echo "follow: second"; `+awaitGate("2")+`exit 4`)
	out, errOut := &syncBuffer{}, &syncBuffer{}
	done := make(chan error, 1)
	go func() { // most likely while the pod is still pending: the stream waits
		done <- cli.Run(t.Context(), []string{"logs", "-f", "--server", s.Federation.ControllerInternalURL, p.ID}, out, errOut)
	}()
	for i, line := range []string{"follow: first", "follow: second"} {
		err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return strings.HasSuffix(out.String(), line+"\n"), nil
		})
		if err != nil {
			t.Fatalf("%q never printed: %q", line, out.String())
		}
		// The line proves the process runs; the row learns it from the spoke's
		// pod watch, another stream, which may come a moment later (the dev
		// runtime, like a kubelet, starts the container before the status
		// update that says Running). What crucible promises is the order on
		// each stream, so the row must reach running while the gate still
		// holds the pod: before it can have ended.
		waitRunning(t, s, p.ID)
		g.open(t, strconv.Itoa(i+1))
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(errOut.String(), p.ID+": failed (exit code 4)") {
			t.Errorf("logs -f ended with %v, stderr %q; want the failed state", err, errOut.String())
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("logs -f did not end after the pod did")
	}
	if want := "follow: first\nfollow: second\n"; out.String() != want {
		t.Errorf("logs -f printed %q, want exactly %q", out.String(), want)
	}
	if wp := getPod(t, s, p.ID); wp.ExitCode == nil || *wp.ExitCode != 4 {
		t.Errorf("pod %+v, want exit code 4", wp)
	}
}

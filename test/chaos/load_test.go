package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/store"
	"crucible.dev/crucible/internal/workpod"
)

// job is one submitted work pod and the artifact it pushes.
type job struct {
	ID, Cluster string
	Body        []byte
}

// wave submits n pods, each `sleep 2; echo done; crucible push result` with
// bytes of its own, and then checks what became of every one of them.
type wave struct {
	t  *testing.T
	s  *devstack.Stack
	c  *client
	pt *podTracker
	n  int
	// before are the rows that existed before the wave: the wave's rows are
	// the others, including rows of submits that never got an answer.
	before map[string]bool

	mu          sync.Mutex
	acked       []job
	interrupted int // submits sent that got no answer (the controller died)
	resubmitted map[int]int
	// replayed counts submits answered with the row an earlier send of the
	// same Idempotency-Key made; renewed, replayed rows whose pod was never
	// created (the controller died before dispatch), submitted again under
	// a new key.
	replayed, renewed int
	// run makes the wave's idempotency keys its own on a shared stack.
	run       string
	submitted chan struct{}
	// pace, if set, spreads the submits: one every pace, so that the wave's
	// dispatches span a fault instead of all landing before it.
	pace time.Duration
	// command is each pod's work (default command): it must print done once
	// and push the result artifact with its CHAOS_KEY.
	command []string
	// target, if set, picks submit i's cluster (default: the stack's
	// spokes in turn); a scenario that removes a spoke steers around it.
	target func(i int) string
	// notes and problems are what a scenario's injection observed beside
	// the wave's own counts; problems fail the scenario.
	notes, problems []string
}

// note records an observation of the scenario for its report.
func (w *wave) note(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.notes = append(w.notes, fmt.Sprintf(format, args...))
}

// problem records a shortfall the injection saw; the scenario fails.
func (w *wave) problem(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.problems = append(w.problems, fmt.Sprintf(format, args...))
}

const submitters = 8

func newWave(t *testing.T, s *devstack.Stack, n int) *wave {
	t.Helper()
	c := newClient(s)
	rows, err := c.listAll(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	before := map[string]bool{}
	for _, r := range rows {
		before[r.ID] = true
	}
	return &wave{t: t, s: s, c: c, pt: trackPods(t, s), n: n, before: before, resubmitted: map[int]int{}, submitted: make(chan struct{}), command: command,
		run: fmt.Sprintf("%08x", rand.Uint32())}
}

// command is each pod's work: it runs, prints done, pushes its result.
var command = commandWith("")

// commandWith is command with flags for crucible push (say, a --timeout
// longer than an outage the scenario holds).
func commandWith(pushFlags string) []string {
	if pushFlags != "" {
		pushFlags += " "
	}
	return []string{"sh", "-c", `set -e; sleep 2; echo done; printf '%s\n' "$CHAOS_KEY" > result.txt; crucible push ` + pushFlags + `result result.txt`}
}

// start submits the wave in the background, spread over both spokes;
// submitted is closed when every pod has been accepted.
func (w *wave) start(ctx context.Context, tag string) {
	idx := make(chan int)
	var wg sync.WaitGroup
	for range submitters {
		wg.Go(func() {
			for i := range idx {
				w.submitOne(ctx, tag, i)
			}
		})
	}
	go func() {
		for i := range w.n {
			if i > 0 && w.pace > 0 {
				select {
				case <-ctx.Done():
				case <-time.After(w.pace):
				}
			}
			idx <- i
		}
		close(idx)
		wg.Wait()
		close(w.submitted)
	}()
}

// submitOne submits until the controller accepts, with an Idempotency-Key
// per pod: a refused connection (the controller is down), a request that
// got no answer and a 5xx are sent again with the same key, so a submit cut
// by a kill answers the row it made instead of making a second one; another
// non-201 answer is counted and submitted again as a new pod (a new key).
func (w *wave) submitOne(ctx context.Context, tag string, i int) {
	cluster := w.s.Spokes[i%len(w.s.Spokes)].Name
	if w.target != nil {
		cluster = w.target(i)
	}
	key := fmt.Sprintf("%s-%d", tag, i)
	req := apiv1.SubmitRequest{Cluster: cluster, Image: "chaos", Command: w.command, Env: []workpod.EnvVar{{Name: "CHAOS_KEY", Value: key}}}
	gen := 0
	for ctx.Err() == nil {
		idem := http.Header{apiv1.IdempotencyKeyHeader: {fmt.Sprintf("%s-%s-%d", w.run, key, gen)}}
		code, h, body, err := w.c.doWith(ctx, http.MethodPost, "/api/pods", req, idem)
		switch {
		case err != nil && errors.Is(err, syscall.ECONNREFUSED):
			// Not counted as interrupted, though it may have been: net/http
			// resends a request carrying an Idempotency-Key on a fresh
			// connection when a reused one broke, so a send the kill cut can
			// end as refused. The replay count shows such sends.
		case err != nil:
			w.mu.Lock()
			w.interrupted++
			w.mu.Unlock()
		case code == http.StatusCreated:
			var wp apiv1.WorkPod
			if jerr := json.Unmarshal(body, &wp); jerr != nil {
				w.t.Errorf("submit answer %q: %v", body, jerr)
				return
			}
			if h.Get(apiv1.ReplayedHeader) == "true" && !w.replayRan(ctx, wp) {
				gen++
				break
			}
			w.mu.Lock()
			w.acked = append(w.acked, job{ID: wp.ID, Cluster: wp.Cluster, Body: []byte(key + "\n")})
			w.mu.Unlock()
			return
		default:
			w.mu.Lock()
			w.resubmitted[code]++
			w.mu.Unlock()
			if code < 500 {
				gen++
			}
			w.t.Logf("submit %s answered %d %s; submitting again", key, code, body)
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// replayRan reports whether the row a replayed submit answered is the
// pod's: it waits while the row is pending (its first send's dispatch in
// flight, or cut by a kill and dispatched when the controller is back), and
// false means the row ended without a pod ever created — a defect the
// scenario reports (Renewed) — so the pod is submitted again as a new one,
// keeping the wave's count whole. That row stays the wave's, unaccepted.
func (w *wave) replayRan(ctx context.Context, wp apiv1.WorkPod) bool {
	w.mu.Lock()
	w.replayed++
	w.mu.Unlock()
	_ = retryUntil(ctx, func() (bool, error) {
		if wp.State != store.StatePending {
			return true, nil
		}
		code, _, body, err := w.c.do(ctx, http.MethodGet, "/api/pods/"+wp.ID, nil)
		if err == nil && code == http.StatusOK {
			_ = json.Unmarshal(body, &wp)
		}
		return false, nil
	})
	if wp.State.Terminal() && wp.PodUID == "" {
		w.mu.Lock()
		w.renewed++
		w.mu.Unlock()
		w.t.Logf("replayed row %s ended %s without a pod (%s); submitting again", wp.ID, wp.State, wp.Reason)
		return false
	}
	return true
}

// awaitSubmitted blocks until every pod was accepted or ctx ends.
func (w *wave) awaitSubmitted(ctx context.Context) bool {
	select {
	case <-w.submitted:
		return true
	case <-ctx.Done():
		return false
	}
}

// outcome is what the checks found.
type outcome struct {
	Submitted, Acked, Interrupted, Resubmitted int
	Replayed, Renewed                          int
	Completed, Failed, Duplicated, Lost        int
	UnackedRows                                map[string]int // state → rows of submits that got no answer
	UnackedReasons                             []string
	ArtifactsPushed, ArtifactsStored           int
	LogsWithOneRun                             int
	OrphansAfterSweep                          int
	Requests                                   map[string]int
	Notes, Problems                            []string
}

// finish waits for every row of the wave to end and counts: completed =
// succeeded with its log collected and printing done once; lost = an
// accepted row not completed; duplicated = a row with more than one pod ever
// created on a spoke; an artifact is stored when readable with its bytes
// and sha256. Then it waits for the sweep to remove the wave's pods.
func (w *wave) finish(ctx context.Context, within time.Duration) outcome {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var o outcome
	problem := func(f string, a ...any) { o.Problems = append(o.Problems, fmt.Sprintf(f, a...)) }
	if !w.awaitSubmitted(ctx) {
		problem("not every pod was accepted within %s", within)
	}
	w.mu.Lock()
	acked := append([]job(nil), w.acked...)
	o.Interrupted = w.interrupted
	o.Replayed, o.Renewed = w.replayed, w.renewed
	for _, n := range w.resubmitted {
		o.Resubmitted += n
	}
	w.mu.Unlock()
	o.Submitted, o.Acked = w.n, len(acked)

	// Every row of the wave (also those of unanswered submits) ends.
	var rows map[string]apiv1.WorkPod
	err := retryUntil(ctx, func() (bool, error) {
		all, err := w.c.listAll(ctx)
		if err != nil {
			return false, err
		}
		rows = map[string]apiv1.WorkPod{}
		live := 0
		for _, r := range all {
			if w.before[r.ID] {
				continue
			}
			rows[r.ID] = r
			if !r.State.Terminal() || (r.State == "succeeded" && !r.LogCollected) {
				live++
			}
		}
		return live == 0, nil
	})
	if err != nil {
		problem("rows still live at the deadline: %v", err)
	}
	ackedIDs := map[string]bool{}
	for _, j := range acked {
		ackedIDs[j.ID] = true
		r, ok := rows[j.ID]
		switch {
		case !ok:
			o.Lost++
			problem("accepted row %s is missing", j.ID)
		case r.State == "succeeded" && r.LogCollected:
			o.Completed++
		case r.State == "failed":
			o.Failed++
			o.Lost++
			problem("row %s failed: %s; its log ends:\n%s", j.ID, r.Reason, w.c.logTail(ctx, j.ID, 15))
		default:
			o.Lost++
			problem("row %s ended %s (%s), log collected %v", j.ID, r.State, r.Reason, r.LogCollected)
		}
	}
	o.UnackedRows = map[string]int{}
	names := map[string]bool{}
	for id, r := range rows {
		names[id] = true
		if runs := w.pt.runs(r.Cluster, id); runs > 1 {
			o.Duplicated++
			problem("row %s: %d pods created on %s", id, runs, r.Cluster)
		}
		if !ackedIDs[id] {
			o.UnackedRows[string(r.State)]++
			if r.State != "succeeded" {
				o.UnackedReasons = append(o.UnackedReasons, fmt.Sprintf("%s %s: %s", id, r.State, r.Reason))
			}
		}
	}
	for _, j := range acked {
		o.ArtifactsPushed++
		ok, err := w.c.artifactIntact(ctx, j.ID, "result", j.Body)
		if err != nil {
			problem("artifact of %s: %v", j.ID, err)
		}
		if ok {
			o.ArtifactsStored++
		}
		code, _, log, err := w.c.do(ctx, http.MethodGet, "/api/pods/"+j.ID+"/artifacts/log", nil)
		if err == nil && code == http.StatusOK && strings.Count(string(log), "done\n") == 1 {
			o.LogsWithOneRun++
		} else if err == nil {
			problem("log of %s: %d, %d runs in %q", j.ID, code, strings.Count(string(log), "done\n"), truncate(string(log), 200))
		}
	}
	err = retryUntil(ctx, func() (bool, error) {
		n, err := crucibleCount(ctx, w.s, names)
		o.OrphansAfterSweep = n
		return err == nil && n == 0, nil
	})
	if err != nil {
		problem("%d pods of the wave still on the spokes after the sweep had its chance", o.OrphansAfterSweep)
	}
	o.Requests = w.c.statuses()
	return o
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

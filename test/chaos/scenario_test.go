package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
)

// scenario is one fault injected while a wave runs.
type scenario struct {
	num                int
	name               string
	injected, expected string
	// strict: every submit must be answered 201 on its first request (the
	// fault must never reach the caller); otherwise only a killed
	// controller's unanswered requests are allowed.
	strict bool
	// spread is how long the submits take (evenly paced); zero: at once.
	spread time.Duration
	// bites: the fault must reach the controller, seen as transient retries
	// (crucible_transient_retries_total); a fault that never bites tests
	// nothing.
	bites bool
	// command replaces every pod's work (default: command).
	command []string
	// inject runs alongside the wave and returns how many faults it
	// injected, with everything it broke restored.
	inject func(ctx context.Context, t *testing.T, s *devstack.Stack, r *rand.Rand, w *wave) (int, error)

	// stack starts a stack of the scenario's own, for a fault that must not
	// reach the other scenarios (nil: the package's shared one). In the
	// reduced subset (make acceptance) such a scenario runs beside the others of
	// its kind (t.Parallel: after the shared-stack scenarios, two at a time),
	// so that their waits overlap; at full load (make chaos) every scenario
	// runs alone, and the report measures one fault at a time.
	stack func(t *testing.T) *devstack.Stack
	// alone keeps a scenario of its own stack alone in the subset too: its
	// bounds are replicas' lease renewals and takeovers, which the load of a
	// second stack beside it would delay.
	alone bool
	// setup adjusts the wave before it starts (more controller URLs); check
	// adds the scenario's own checks and counts once the wave finished (it
	// may also report through w's note and problem, as inject does); load
	// describes a load other than the default.
	setup func(t *testing.T, s *devstack.Stack, w *wave)
	check func(ctx context.Context, t *testing.T, s *devstack.Stack, w *wave, o *outcome)
	load  string
	// pods is the wave's size (0: cfg.Pods).
	pods int
	// transient are submit answers other than 201 the fault may cause (503
	// while the store is down): the caller submits again, and the rows of
	// such submits must still end succeeded or lost.
	transient []int
}

// startAPIServer restarts c's kube-apiserver and waits until it is ready —
// longer than devstack's own bound if need be: under the full suite's load
// (hundreds of pod processes on two cores) a restart can take minutes, and
// the harness must not fail for the machine's pace. A server that never
// becomes ready still fails the scenario.
func startAPIServer(ctx context.Context, s *devstack.Stack, c *devstack.Cluster) error {
	err := s.StartAPIServer(ctx, c)
	if err == nil {
		return nil
	}
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		if c.Ready(ctx) == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Second):
		}
	}
	return err
}

// between waits a random duration in [lo, hi) or until ctx ends.
func between(ctx context.Context, r *rand.Rand, lo, hi time.Duration) {
	d := lo + time.Duration(r.Int64N(int64(hi-lo)))
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// run runs the scenario: baseline, wave plus faults, checks, baseline again;
// it records the result and fails the test on any shortfall.
func (sc scenario) run(t *testing.T) {
	if sc.stack != nil && !sc.alone && !cfg.Full {
		t.Parallel()
	}
	s := sc.stackFor(t)
	if died := s.Died(); len(died) > 0 {
		// A shared stack that lost a process fails every scenario after
		// it; say why at once instead of after a wave's bound.
		t.Fatalf("the stack lost processes before this scenario:\n%s", strings.Join(died, "\n"))
	}
	r, seed := rng(t, sc.num)
	ctx := t.Context()
	base, err := controllerStats(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	w := newWave(t, s, sc.podCount())
	w.pace = sc.spread / time.Duration(sc.podCount())
	if sc.command != nil {
		w.command = sc.command
	}
	if sc.setup != nil {
		sc.setup(t, s, w)
	}
	began := time.Now()
	w.start(ctx, fmt.Sprintf("s%d-%d", sc.num, seed))
	faults, injErr := sc.inject(ctx, t, s, r, w)
	if injErr != nil {
		t.Errorf("inject: %v", injErr)
	}
	within := 4 * time.Minute
	if cfg.Full {
		within = 15 * time.Minute
	}
	o := w.finish(ctx, within)
	if sc.check != nil {
		sc.check(ctx, t, s, w, &o)
	}
	w.mu.Lock()
	o.Notes = append(o.Notes, w.notes...)
	o.Problems = append(o.Problems, w.problems...)
	w.mu.Unlock()
	w.c.http.CloseIdleConnections()
	// The next scenario on the shared stack finds its spokes at work: an API
	// server restarted here may refuse the controller for a moment, and the
	// node agents may still be in their reconnect backoff.
	for _, c := range s.Spokes {
		if err := s.SettleSpoke(ctx, c); err != nil {
			o.Problems = append(o.Problems, err.Error())
		}
	}
	after, settled := settle(ctx, s, base, 90*time.Second)
	if !settled {
		o.Problems = append(o.Problems, fmt.Sprintf("controller did not return to baseline: goroutines %d → %d, fds %d → %d (slack %d, %d)",
			base.Goroutines, after.Goroutines, base.FDs, after.FDs, goroutineSlack, fdSlack))
	}
	if sc.strict && (o.Interrupted > 0 || o.Resubmitted > 0) {
		o.Problems = append(o.Problems, fmt.Sprintf("the fault reached callers: %d submits unanswered, %d answered non-201", o.Interrupted, o.Resubmitted))
	}
	if sc.bites && after.Retries <= base.Retries {
		o.Problems = append(o.Problems, fmt.Sprintf("the fault never reached the controller (transient retries %d → %d)", base.Retries, after.Retries))
	}
	if n := o.Resubmitted - sc.transientAnswers(w); n > 0 {
		o.Problems = append(o.Problems, fmt.Sprintf("%d submits answered other than 201", n))
	}
	if o.ArtifactsStored != o.ArtifactsPushed || o.LogsWithOneRun != o.Acked || o.Completed != o.Acked {
		o.Problems = append(o.Problems, fmt.Sprintf("completed %d, logs with one run %d, artifacts stored %d of %d accepted", o.Completed, o.LogsWithOneRun, o.ArtifactsStored, o.Acked))
	}
	for st, n := range o.UnackedRows {
		// A submit whose answer the crash swallowed is sent again with its
		// Idempotency-Key and answered with the row it made, which the wave
		// then takes as the pod's; a row the kill cut before its dispatch
		// is dispatched when the controller is back. So no row is left
		// over: one that ran is a submit that ran twice as two rows (the
		// defect idempotency keys exist to prevent), one that ended lost a
		// cut submit that never ran under its first key.
		o.Problems = append(o.Problems, fmt.Sprintf("%d rows the wave did not take as a pod's ended %s", n, st))
	}
	if o.Renewed > 0 {
		o.Problems = append(o.Problems, fmt.Sprintf("%d submits cut before their dispatch ended without a pod under their first Idempotency-Key", o.Renewed))
	}
	for _, why := range o.UnackedReasons {
		t.Logf("row of a submit not answered 201: %s", why)
	}
	res := result{
		Num: sc.num, OwnStack: sc.stack != nil, Scenario: fmt.Sprintf("%d. %s", sc.num, sc.name), Injected: sc.injected, Expected: sc.expected, Seed: seed, Faults: faults,
		Load:     fmt.Sprintf("%d pods over %d spokes, %d concurrent submitters; each `%s`", cfg.Pods, len(s.Spokes), submitters, w.command[len(w.command)-1]),
		Duration: time.Since(began).Round(time.Second).String(), Requests: o.Requests, Before: base, After: after, Notes: o.Notes, Problems: o.Problems,
		Pods: podCounts{Submitted: o.Submitted, Accepted: o.Acked, Interrupted: o.Interrupted, Resubmitted: o.Resubmitted, Replayed: o.Replayed, Renewed: o.Renewed, Completed: o.Completed,
			Failed: o.Failed, Duplicated: o.Duplicated, Lost: o.Lost, LogsWithOneRun: o.LogsWithOneRun, OrphansAfter: o.OrphansAfterSweep, UnansweredRows: o.UnackedRows},
		Artifacts: artifactCounts{Pushed: o.ArtifactsPushed, Stored: o.ArtifactsStored, Lost: o.ArtifactsPushed - o.ArtifactsStored},
	}
	if sc.load != "" {
		res.Load = sc.load
	}
	res.Passed = len(o.Problems) == 0 && injErr == nil
	res.Happened = "as expected"
	if !res.Passed {
		res.Happened = fmt.Sprintf("FAILED: %d problems", len(o.Problems))
	}
	record(res)
	t.Logf("%s: accepted %d, completed %d, duplicated %d, lost %d, artifacts %d/%d, faults %d, requests %v, goroutines %d→%d, fds %d→%d, retries %d→%d",
		res.Scenario, o.Acked, o.Completed, o.Duplicated, o.Lost, o.ArtifactsStored, o.ArtifactsPushed, faults, o.Requests,
		base.Goroutines, after.Goroutines, base.FDs, after.FDs, base.Retries, after.Retries)
	for i, p := range o.Problems {
		if i == 20 {
			t.Errorf("… and %d more problems", len(o.Problems)-20)
			break
		}
		t.Error(p)
	}
	if !res.Passed {
		logTails(t, s)
	}
}

// logTails prints what a failed scenario's stack logged last: any process of
// the stack that died by itself, the controller's and the dev runtime's
// warnings and errors, the spokes' API servers' last lines — so that a
// failure in CI, whose stack is removed with the test, can be read
// afterwards.
func logTails(t *testing.T, s *devstack.Stack) {
	t.Helper()
	for _, died := range s.Died() {
		t.Log(died)
	}
	for _, c := range s.Spokes {
		for _, name := range []string{"kube-apiserver-" + c.Name, "kwok-" + c.Name} {
			data, err := os.ReadFile(s.LogFile(name))
			if err != nil {
				t.Logf("%s's log: %v", name, err)
				continue
			}
			lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
			t.Logf("%s's log, its last lines:\n%s", name, strings.Join(lines[max(0, len(lines)-15):], "\n"))
		}
		t.Logf("%s: %s", c.Name, s.NodeSummary(context.WithoutCancel(t.Context()), c))
	}
	for _, name := range []string{"crucible-controller", "crucible-dev-runtime"} {
		data, err := os.ReadFile(s.LogFile(name))
		if err != nil {
			t.Logf("%s's log: %v", name, err)
			continue
		}
		var keep []string
		for _, line := range strings.Split(string(data), "\n") {
			warns := strings.Contains(line, `"level":"WARN"`) || strings.Contains(line, `"level":"ERROR"`) // the controller logs JSON
			if warns || (name == "crucible-dev-runtime" && line != "") {
				keep = append(keep, line)
			}
		}
		keep = keep[max(0, len(keep)-40):]
		t.Logf("%s's log, its last %d warnings and errors (runtime: last lines):\n%s", name, len(keep), strings.Join(keep, "\n"))
	}
}

func (sc scenario) podCount() int {
	if sc.pods > 0 {
		return sc.pods
	}
	return cfg.Pods
}

func (sc scenario) stackFor(t *testing.T) *devstack.Stack {
	if sc.stack != nil {
		return sc.stack(t)
	}
	return devstacktest.Shared(t)
}

// transientAnswers counts the wave's submits answered with a status the
// scenario allows.
func (sc scenario) transientAnswers(w *wave) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, code := range sc.transient {
		n += w.resubmitted[code]
	}
	return n
}

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/fleet"
)

// A spoke unreachable: once the wave is dispatched, wharf's kube-apiserver
// is stopped with SIGSTOP — its port still takes connections but nothing
// answers, as with a host gone from the network — for 30 s (5 minutes at
// full load), then continued. Meanwhile wharf probes unreachable, the sweep
// skips it, none of its rows is lost or failed, and dock's pods complete and
// are swept; afterwards every pod completes once. Pods push with a --timeout
// longer than the outage: a pod's push giving up is the pod's choice, not
// crucible's verdict.
func TestChaos3SpokeUnreachable(t *testing.T) {
	hold := time.Duration(faultsFor(30, 300)) * time.Second
	scenario{
		num: 3, name: "a spoke unreachable (its API server hangs)",
		injected: fmt.Sprintf("SIGSTOP of wharf's kube-apiserver for %s once every pod was dispatched (pods running, pushing, awaiting collection), then SIGCONT", hold),
		expected: "wharf probes unreachable and its sweeps are skipped; none of its rows lost or failed meanwhile; dock's pods complete and are swept meanwhile; " +
			"after SIGCONT every pod completes once with its log and artifact",
		strict:  true,
		spread:  time.Duration(faultsFor(3, 20)) * time.Second,
		command: commandWith("--timeout 15m"),
		inject: func(ctx context.Context, t *testing.T, s *devstack.Stack, r *rand.Rand, w *wave) (int, error) {
			w.awaitSubmitted(ctx)
			between(ctx, r, 0, 1500*time.Millisecond)
			return 1, unreachable(ctx, t, s, w, s.Spoke("wharf"), s.Spoke("dock"), hold)
		},
	}.run(t)
}

// unreachable pauses down's API server for at least hold (and until the
// other spoke's rows are done, a sweep of down was skipped and a pod of other
// swept, within two minutes more), checking what the controller does
// meanwhile, then continues it and waits until the controller sees the spoke
// healthy again.
func unreachable(ctx context.Context, t *testing.T, s *devstack.Stack, w *wave, down, other *devstack.Cluster, hold time.Duration) error {
	name := "kube-apiserver-" + down.Name
	if err := s.PauseProcess(name); err != nil {
		return err
	}
	paused, resumed := time.Now(), false
	resume := func() error {
		if resumed {
			return nil
		}
		resumed = true
		return s.ResumeProcess(name)
	}
	t.Cleanup(func() { _ = resume() }) // a failing test still leaves a running stack behind
	// The counters are read once the API server is stopped: a sweep's
	// deletes that succeed between a reading taken before the pause and the
	// pause itself (ci17: 2, in a burst of finished pods) happened while the
	// spoke was still reachable. While it is stopped none can succeed.
	before, err := scrape(ctx, s.Federation.ControllerMetricsURL)
	if err != nil {
		return err
	}
	var seenDown bool
	var rows rowsBy
	for ctx.Err() == nil {
		h, err := health(ctx, w.c, down.Name)
		if err == nil && h.CheckedAt.After(paused) && !h.Reachable {
			seenDown = true
		}
		if rows, err = rowsByCluster(ctx, w); err != nil {
			return err
		}
		if n := rows.ended(down.Name, "lost", "failed"); n > 0 {
			w.problem("%d rows of %s ended lost or failed while it was unreachable", n, down.Name)
			break
		}
		elapsed := time.Since(paused)
		if elapsed >= hold+2*time.Minute {
			break
		}
		if elapsed >= hold && rows.done(other.Name) {
			// The pause lasts until a sweep of down has met it: a sweep that
			// began just before the pause waits out its bounds first.
			m, err := scrape(ctx, s.Federation.ControllerMetricsURL)
			if err != nil {
				return err
			}
			if byLabel(before, m, "crucible_sweep_skipped_total", "cluster")[down.Name] > 0 &&
				byLabel(before, m, "crucible_sweep_deletions_total", "cluster")[other.Name] > 0 {
				break
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	during, err := scrape(ctx, s.Federation.ControllerMetricsURL)
	if err != nil {
		return err
	}
	if err := resume(); err != nil {
		return err
	}
	inFlight := rows.live(down.Name)
	w.note("%s paused %s: %d of its rows still in flight at the end (running, or finished and not yet collected), states then %v; %s's rows %v",
		down.Name, time.Since(paused).Round(time.Second), inFlight, rows.states[down.Name], other.Name, rows.states[other.Name])
	skips := byLabel(before, during, "crucible_sweep_skipped_total", "cluster")[down.Name]
	swept := byLabel(before, during, "crucible_sweep_deletions_total", "cluster")
	w.note("meanwhile: sweeps of %s skipped %d, pods swept %v, drop-box answers %v, rows marked lost by reconcile %v",
		down.Name, skips, swept, byLabel(before, during, "crucible_ingest_requests_total", "outcome"),
		byLabel(before, during, "crucible_reconcile_lost_total", "cluster"))
	if !seenDown {
		w.problem("the controller never probed %s unreachable during the outage", down.Name)
	}
	if inFlight == 0 {
		w.problem("the outage caught none of %s's pods in flight: it tested nothing", down.Name)
	}
	if !rows.done(other.Name) {
		w.problem("%s's rows did not complete while %s was unreachable: %v", other.Name, down.Name, rows.states[other.Name])
	}
	if skips == 0 {
		w.problem("no sweep of %s was skipped (its list never failed) while it was unreachable", down.Name)
	}
	if swept[down.Name] > 0 {
		w.problem("the sweep deleted %d pods of %s while it was unreachable", swept[down.Name], down.Name)
	}
	if swept[other.Name] == 0 {
		w.problem("no pod of %s was swept while %s was unreachable: a hung cluster stalls the sweep of the others", other.Name, down.Name)
	}
	err = retryUntil(ctx, func() (bool, error) {
		h, err := health(ctx, w.c, down.Name)
		return err == nil && h.Reachable && h.CredentialsValid && h.CheckedAt.After(time.Now().Add(-5*time.Second)), nil
	})
	if err != nil {
		return err
	}
	noteNode(ctx, w, down, paused)
	return nil
}

// noteNode records whether the spoke's node changed its Ready condition
// since the outage began: kube-controller-manager, blind during the pause,
// may mark it NotReady (and taint it for eviction) once it sees again.
func noteNode(ctx context.Context, w *wave, c *devstack.Cluster, since time.Time) {
	node, err := c.Client.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
	if err != nil {
		w.note("%s's node: %v", c.Name, err)
		return
	}
	for _, cond := range node.Status.Conditions {
		if cond.Type != corev1.NodeReady {
			continue
		}
		changed := "unchanged since before the outage"
		if cond.LastTransitionTime.After(since) {
			changed = fmt.Sprintf("changed %s after the outage began (%s)", cond.LastTransitionTime.Sub(since).Round(time.Second), cond.Reason)
		}
		w.note("%s's node after the outage: Ready=%s, %s; taints %v", c.Name, cond.Status, changed, node.Spec.Taints)
	}
}

// health is the controller's view of cluster (GET /api/clusters).
func health(ctx context.Context, c *client, cluster string) (fleet.Health, error) {
	code, _, body, err := c.do(ctx, http.MethodGet, "/api/clusters", nil)
	if err != nil {
		return fleet.Health{}, err
	}
	if code != http.StatusOK {
		return fleet.Health{}, fmt.Errorf("clusters: %d %s", code, truncate(string(body), 200))
	}
	var all []apiv1.Cluster
	if err := json.Unmarshal(body, &all); err != nil {
		return fleet.Health{}, fmt.Errorf("clusters: %w", err)
	}
	for _, cl := range all {
		if cl.Name == cluster {
			return cl.Health, nil
		}
	}
	return fleet.Health{}, fmt.Errorf("no cluster %s in %s", cluster, truncate(string(body), 200))
}

// rowsBy counts the wave's rows per cluster: by state ("succeeded" only once
// its log is collected; "collecting" before) and how many are in flight.
type rowsBy struct {
	states map[string]map[string]int
}

func rowsByCluster(ctx context.Context, w *wave) (rowsBy, error) {
	all, err := w.c.listAll(ctx)
	if err != nil {
		return rowsBy{}, err
	}
	rb := rowsBy{states: map[string]map[string]int{}}
	for _, r := range all {
		if w.before[r.ID] {
			continue
		}
		st := string(r.State)
		if r.State == "succeeded" && !r.LogCollected {
			st = "collecting"
		}
		if rb.states[r.Cluster] == nil {
			rb.states[r.Cluster] = map[string]int{}
		}
		rb.states[r.Cluster][st]++
	}
	return rb, nil
}

func (rb rowsBy) ended(cluster string, states ...string) int {
	n := 0
	for _, st := range states {
		n += rb.states[cluster][st]
	}
	return n
}

// live counts rows not yet ended with their log collected.
func (rb rowsBy) live(cluster string) int {
	n := 0
	for st, c := range rb.states[cluster] {
		if st != "succeeded" && st != "failed" && st != "lost" && st != "cancelled" {
			n += c
		}
	}
	return n
}

// done: every row of cluster succeeded with its log collected.
func (rb rowsBy) done(cluster string) bool {
	return rb.live(cluster) == 0 && rb.states[cluster]["succeeded"] > 0
}

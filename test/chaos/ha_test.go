package chaos

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
)

// haLease and haTakeover are the HA tests' lease and takeover bound.
const haLease, haTakeover = devstacktest.HALease, devstacktest.HATakeover

// ready is the readiness check RestartProcess waits for after starting r
// again: its API reports ready.
func ready(r devstack.Replica) func(context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.InternalURL+"/readyz", nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz of %s: %s", r.Process, resp.Status)
		}
		return nil
	}
}

// loopMetrics are the counters only the loops that must run once move
// (await, log collection, reconcile, sweep): a replica that never held the
// lease must show none of them.
var loopMetrics = []string{"crucible_work_pod_transitions_total", "crucible_log_collections_total", "crucible_sweep_deletions_total", "crucible_reconcile_lost_total"}

// loopWork reads how often the replica acquired the lease in its life and
// how much loop work it did.
func loopWork(ctx context.Context, r devstack.Replica) (acquired, work int, err error) {
	sums, err := metricSums(ctx, r.MetricsURL)
	if err != nil {
		return 0, 0, err
	}
	for _, name := range loopMetrics {
		work += sums[name]
	}
	return sums[`crucible_leader_transitions_total{event="acquired"}`], work, nil
}

// metricSums reads a /metrics page and sums each metric over its series
// (the leader's acquired events are kept by their own line).
func metricSums(ctx context.Context, base string) (map[string]int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("read metrics: %w", err)
	}
	defer resp.Body.Close()
	sums := map[string]int{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		series, v, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(series, "#") {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", series, err)
		}
		name, _, _ := strings.Cut(series, "{")
		sums[name] += int(f)
		if name != series {
			sums[series] += int(f)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read metrics: %w", err)
	}
	return sums, nil
}

// idleFollowers checks that every replica that never led did no loop work:
// loops running without the lease would otherwise go unnoticed, as their
// writes mostly repeat the leader's.
func idleFollowers(ctx context.Context, when string, rs ...devstack.Replica) []string {
	var problems []string
	for _, r := range rs {
		acquired, work, err := loopWork(ctx, r)
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("%s, %s: %v", when, r.Process, err))
		case acquired == 0 && work > 0:
			problems = append(problems, fmt.Sprintf("%s, %s never held the lease but did %d pieces of loop work (%v)", when, r.Process, work, loopMetrics))
		}
	}
	return problems
}

// Two controller replicas share one PostgreSQL; submits go to both in turn.
// The leader (the replica running await, reconcile and the sweep) is
// SIGKILLed mid-wave; the other takes the lease over and finishes the work,
// and the killed one is started again (as its Deployment would) so that the
// pods it dispatched can push through it. No pod runs twice, nothing is
// lost, every row ends.
func TestChaos10LeaderKilled(t *testing.T) {
	var ms []devstack.Replica
	var followerProblems []string
	scenario{
		num: 10, name: "HA: the leader killed under load",
		alone:    true,
		injected: fmt.Sprintf("two controller replicas on one PostgreSQL (lease %s); SIGKILL of the leader at a seeded moment of the wave, then restarted once the other led", haLease),
		expected: "the other replica takes over within the lease; a replica that never led does no loop work (no transitions, log collections, sweeps); every accepted pod runs once, ends succeeded with its log and artifact; only submits in flight at the kill go unanswered",
		spread:   time.Duration(faultsFor(10, 40)) * time.Second,
		stack: func(t *testing.T) *devstack.Stack {
			s, _ := pgStack(t, true, haLease)
			a, b := devstacktest.Replicas(t, s)
			ms = []devstack.Replica{a, b}
			if _, err := devstacktest.SoleLeader(t.Context(), 3*haLease, ms...); err != nil {
				t.Fatal(err)
			}
			return s
		},
		setup: func(t *testing.T, s *devstack.Stack, w *wave) {
			w.c.bases = []string{ms[0].InternalURL, ms[1].InternalURL}
		},
		check: func(ctx context.Context, t *testing.T, s *devstack.Stack, w *wave, o *outcome) {
			o.Problems = append(o.Problems, followerProblems...)
			o.Problems = append(o.Problems, idleFollowers(ctx, "after the wave", ms...)...)
		},
		inject: func(ctx context.Context, t *testing.T, s *devstack.Stack, r *rand.Rand, w *wave) (int, error) {
			n := faultsFor(1, 3)
			for i := range n {
				between(ctx, r, time.Second, time.Duration(faultsFor(6, 20))*time.Second)
				leader, err := devstacktest.SoleLeader(ctx, haTakeover, ms...)
				if err != nil {
					return i, err
				}
				other := ms[0]
				if other == leader {
					other = ms[1]
				}
				followerProblems = append(followerProblems, idleFollowers(ctx, fmt.Sprintf("before kill %d", i+1), other)...)
				killed := time.Now()
				if err := s.KillProcess(leader.Process); err != nil {
					return i, err
				}
				if _, err := devstacktest.SoleLeader(ctx, haTakeover, other); err != nil {
					return i, fmt.Errorf("takeover by %s after killing %s: %w", other.Process, leader.Process, err)
				}
				t.Logf("kill %d: %s took over from %s %s after the SIGKILL (lease %s)", i+1, other.Process, leader.Process,
					time.Since(killed).Round(100*time.Millisecond), haLease)
				if err := s.RestartProcess(context.WithoutCancel(ctx), leader.Process, ready(leader)); err != nil {
					return i, err
				}
			}
			return n, nil
		},
	}.run(t)
}

//go:build fleet

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
)

// A hundred spokes from one controller (issue 42's acceptance, make fleet):
// 150 spokes on 4 API servers (devstack's shared-server spokes), the first
// 100 listed, on PostgreSQL with leader election. A pod on every spoke
// completes with its log; one reload removes 50 spokes — pods running there
// drain and still succeed — and adds the other 50, which then run pods,
// with the process unchanged; then three replicas hold 33-34 spokes each,
// and once one is SIGKILLed with a pod in flight on every spoke, all its
// spokes are owned again after its Leases expire and every pod has
// succeeded once. It reports the times and the controller's cost.
func TestFleetOfAHundredSpokes(t *testing.T) {
	const listed, perServer = 100, 38
	names := devstack.SpokeNames(150)
	spokes := devstack.NamedSpokes(names...)
	for i := listed; i < len(spokes); i++ {
		spokes[i].Unlisted = true
	}
	s, _ := devstacktest.StartOnPostgres(t, devstack.Options{
		Crucible: devstacktest.BuildCrucible, LeaderElect: true, LeaseDuration: haLease,
		SweepInterval: time.Minute, OrphanGrace: time.Hour, RetryBudget: time.Minute, DrainTimeout: 3 * time.Minute,
		SpokesPerServer: perServer, Spokes: spokes,
	})
	servers := 0
	for name := range s.Processes() {
		if strings.HasPrefix(name, "kube-apiserver-") && name != "kube-apiserver-hub" {
			servers++
		}
	}
	if servers != 4 {
		t.Fatalf("%d spoke API servers, want 4 for %d spokes, %d a server", servers, len(names), perServer)
	}
	main := s.Controller()
	pid := s.Processes()[main.Process]
	first, second := names[:listed], names[len(names)-listed:] // the reload drops names[:50], adds names[100:]
	began := time.Now()
	healthy := func(want []string) func([]apiv1.Cluster) bool {
		return func(cs []apiv1.Cluster) bool {
			n := 0
			for _, name := range want {
				if c, ok := clusterNamed(cs, name); ok && !c.Draining && c.Health.CredentialsValid {
					n++
				}
			}
			return n == len(want)
		}
	}
	waitClusters(t, s, "with the first 100 spokes healthy", healthy(first))
	t.Logf("100 spokes on %d API servers healthy %s after the stack was ready", servers, time.Since(began).Round(100*time.Millisecond))

	// A pod on every spoke completes with its log.
	perSpoke := func(spokes []string, script string) func(int) apiv1.SubmitRequest {
		return func(i int) apiv1.SubmitRequest {
			return apiv1.SubmitRequest{Cluster: spokes[i%len(spokes)], Image: "x", Command: []string{"sh", "-c", strings.ReplaceAll(script, "SPOKE", spokes[i%len(spokes)])}}
		}
	}
	ids, uids := submitVia(t, []devstack.Replica{main}, listed, 16, perSpoke(first, "echo hello from SPOKE"))
	awaitSucceededOnce(t, main, ids, uids, 5*time.Minute)
	for i, id := range ids {
		if log := podLog(t, s, id); !strings.Contains(log, "hello from "+first[i]) {
			t.Errorf("%s on %s: log %q", id, first[i], log)
		}
	}

	// One reload: 50 out (with a pod running on each), 50 in.
	draining, draininguids := submitVia(t, []devstack.Replica{main}, 50, 16, perSpoke(first[:50], "echo start; sleep 15; echo drained SPOKE"))
	for _, id := range draining {
		waitRunning(t, s, id)
	}
	text, err := s.ReplicaProfile(main, second...)
	if err != nil {
		t.Fatal(err)
	}
	writeProfile(t, s, text)
	reloaded := time.Now()
	waitReloads(t, s, "applied", 1)
	waitClusters(t, s, "with the 50 new spokes healthy", healthy(second))
	newHealthy := time.Since(reloaded)
	added, addeduids := submitVia(t, []devstack.Replica{main}, 50, 50, perSpoke(second[50:], "echo new SPOKE"))
	dispatched := time.Since(reloaded)
	awaitSucceededOnce(t, main, append(draining, added...), append(draininguids, addeduids...), 5*time.Minute)
	waitClusters(t, s, "without the 50 removed spokes", func(cs []apiv1.Cluster) bool { return len(cs) == listed && healthy(second)(cs) })
	if got := s.Processes()[main.Process]; got != pid {
		t.Errorf("the controller's pid is %d, was %d: it restarted", got, pid)
	}
	rss := processRSS(t, pid)
	goroutines := controllerMetricOf(t, main, "go_goroutines")
	t.Logf("reload of 50 out, 50 in: all 50 new healthy %s after it, a pod dispatched on each %s after it; controller at 100 spokes: RSS %d MiB, %.0f goroutines (%.1f a spoke)",
		newHealthy.Round(10*time.Millisecond), dispatched.Round(10*time.Millisecond), rss>>20, goroutines, goroutines/listed)

	// Three replicas: 33-34 spokes each; one SIGKILLed with a pod in flight
	// on every spoke; its spokes owned again once its Leases expire.
	replicas := []devstack.Replica{main}
	for _, name := range []string{"b", "c"} {
		r, err := s.StartControllerWith(t.Context(), name, second...)
		if err != nil {
			t.Fatal(err)
		}
		replicas = append(replicas, *r)
	}
	var leases map[string]spokeLease
	held := func(what string, within time.Duration, ok func(map[string]int) bool) {
		t.Helper()
		err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, within, true, func(context.Context) (bool, error) {
			leases = spokeLeases(t, s, second...)
			n := map[string]int{}
			for _, l := range leases {
				n[l.holder]++
			}
			return len(leases) == listed && n[""] == 0 && ok(n), nil
		})
		if err != nil {
			n := map[string]int{}
			for _, l := range leases {
				n[l.holder]++
			}
			t.Fatalf("spoke Leases never %s: holders %v", what, n)
		}
	}
	spread := func(n map[string]int) bool {
		for _, k := range n {
			if k < 33 || k > 34 {
				return false
			}
		}
		return len(n) == 3
	}
	held("33-34 on each of three replicas", 3*time.Minute, spread)
	inflight, inflightuids := submitVia(t, replicas, listed, 16, perSpoke(second, "echo start; sleep 5; echo done"))
	// The victim is a replica started here, so that the stack's own serves
	// the reads below; its Lease identity is the holder of a spoke whose
	// loops it runs (they start just after the Lease is won).
	victim, victimHolder := replicas[1], ""
	err = wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		for _, name := range second {
			if controllerMetricOf(t, victim, `crucible_cluster_loops{cluster="`+name+`"}`) == 1 {
				victimHolder = spokeLeases(t, s, name)[name].holder
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%s runs no spoke's loops: %v", victim.Process, err)
	}
	if err := s.KillProcess(victim.Process); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	held("all owned by the two survivors", 4*haTakeover, func(n map[string]int) bool { return n[victimHolder] == 0 && len(n) == 2 })
	takeover := time.Since(killed)
	awaitSucceededOnce(t, main, inflight, inflightuids, 5*time.Minute)
	t.Logf("three replicas: 33-34 spokes each; after %s's SIGKILL every spoke owned again in %s (lease %s); %d pods in flight all succeeded once",
		victim.Process, takeover.Round(10*time.Millisecond), haLease, len(inflight))
}

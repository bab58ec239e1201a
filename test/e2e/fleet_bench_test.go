package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/benchreport"
	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
	"crucible.dev/crucible/internal/profile"
)

// BenchmarkFleetReplicas is the fleet benchmark's scaling figure: turn pods
// held unscheduled over ten spokes, submitted through three sharded
// replicas on one PostgreSQL store against the same load through one
// replica holding every spoke, on the same stack in one run. The order is
// one, three, one (the lone replica's rate is both of its quarters
// together), so a machine that slows as the spokes fill up weighs on both
// sides. Every replica dispatches what it is sent; sharding spreads the
// spokes' watches, workers and sweeps.
func BenchmarkFleetReplicas(b *testing.B) {
	const n, workers = 4_000, 16
	names := devstack.SpokeNames(10)
	s, _ := devstacktest.StartOnPostgres(b, devstack.Options{
		Crucible: devstacktest.CrucibleBinary(b), LeaderElect: true, LeaseDuration: haLease,
		SweepInterval: profile.DefaultSweepInterval, PodNodeSelector: holdSelector,
		Spokes: devstack.NamedSpokes(names...),
	})
	main := s.Controller()
	held := func(what string, ok func(holders map[string]int) bool) {
		b.Helper()
		var leases map[string]spokeLease
		err := wait.PollUntilContextTimeout(b.Context(), 500*time.Millisecond, 4*haTakeover, true, func(context.Context) (bool, error) {
			leases = spokeLeases(b, s, names...)
			holders := map[string]int{}
			for _, l := range leases {
				holders[l.holder]++
			}
			return len(leases) == len(names) && holders[""] == 0 && ok(holders), nil
		})
		if err != nil {
			b.Fatalf("spoke Leases never %s: %+v", what, leases)
		}
	}
	oneHolder := func(h map[string]int) bool { return len(h) == 1 }
	req := apiv1.SubmitRequest{Image: "x", Command: sleeps("1s")}
	through := func(replicas []devstack.Replica) func(context.Context, int) error {
		sets := make([]func(context.Context, int) error, len(replicas))
		for i, r := range replicas {
			sets[i] = submitTurns(r.InternalURL, names, req)
		}
		return func(ctx context.Context, i int) error { return sets[i%len(sets)](ctx, i) }
	}
	load := func(who string, set func(context.Context, int) error, from, to int) time.Duration {
		b.Helper()
		d, err := createLoop(b.Context(), workers, from, to, set)
		if err != nil {
			b.Fatalf("%s: %v", who, err)
		}
		return d
	}

	b.ResetTimer()
	for range b.N {
		held("all on one replica", oneHolder)
		one := load("one replica", through([]devstack.Replica{main}), 0, n/4)
		var replicas []devstack.Replica
		for _, name := range []string{"b", "c"} {
			r, err := s.StartController(b.Context(), name)
			if err != nil {
				b.Fatal(err)
			}
			replicas = append(replicas, *r)
		}
		held("3-4 on each of three replicas", func(h map[string]int) bool {
			for _, k := range h {
				if k < 3 || k > 4 {
					return false
				}
			}
			return len(h) == 3
		})
		three := load("three replicas", through(append([]devstack.Replica{main}, replicas...)), n/4, 3*n/4)
		for _, r := range replicas {
			if err := s.KillProcess(r.Process); err != nil {
				b.Fatal(err)
			}
		}
		held("all back on one replica", oneHolder)
		one += load("one replica", through([]devstack.Replica{main}), 3*n/4, n)

		oneRate, threeRate := float64(n/2)/one.Seconds(), float64(n/2)/three.Seconds()
		b.Logf("one replica %.1f pods/s, three sharded replicas %.1f pods/s (%.2f×)", oneRate, threeRate, threeRate/oneRate)
		b.ReportMetric(threeRate/oneRate, "scaling")
		rec := benchreport.Record{ID: "fleet-replicas", Case: fmt.Sprintf("%d turn pods over %d spokes, 3 sharded replicas vs 1", n, len(names)), Unit: "pods/s", Value: threeRate,
			Goal: "report the scaling",
			Method: fmt.Sprintf("%d POST /api/pods from %d workers over the %d spokes in turn, pods held unscheduled, the store PostgreSQL; "+
				"a quarter through one replica holding every spoke's Lease, half through three sharded replicas in turn once the Leases were split 3-4 each, "+
				"the last quarter through the one replica again once the other two were SIGKILLed and their Leases came back to it; "+
				"every replica on the same cores as the spokes; kube-apiserver %s", n, workers, len(names), devstack.KubernetesVersion),
		}.WithBaseline("one replica holding all the spokes", oneRate)
		if err := benchreport.Append(rec); err != nil {
			b.Fatal(err)
		}
	}
}

package metrics

import "github.com/prometheus/client_golang/prometheus"

// Leader election metrics (R-C10).
var (
	// Leader is 1 on the replica that runs the loops that must run once
	// (await, log collection, startup reconcile, sweep), 0 elsewhere. The sum
	// over replicas should be 1; 0 for longer than the lease duration means
	// nobody collects logs.
	Leader = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "crucible_leader",
		Help: "1 while this replica holds the leader Lease and runs the reconcile loops, else 0 (always 1 without leader election).",
	})
	// LeaderTransitions counts this replica's gains and losses of the lease,
	// by event (acquired, lost).
	LeaderTransitions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "crucible_leader_transitions_total",
		Help: "Leader Lease events on this replica: acquired, lost.",
	}, []string{"event"})
)

func init() { Registry.MustRegister(Leader, LeaderTransitions) }

package metrics

import "github.com/prometheus/client_golang/prometheus"

// Controller metrics: every decision an operator would alert on.
var (
	// TransientRetries counts retries of transient spoke errors, by operation
	// (create-pod, delete-pod, pod-log, list-pods, ...). A rising rate means a
	// spoke is flapping; the budget keeps runs alive meanwhile.
	TransientRetries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "crucible_transient_retries_total",
		Help: "Retries of transient errors (network, timeout, 429, 5xx, watch expiry) by operation.",
	}, []string{"op"})

	// Dispatches counts work-pod dispatches by cluster and result
	// (ok, adopted, error).
	Dispatches = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "crucible_dispatches_total",
		Help: "Work-pod dispatches by cluster and result: ok, adopted (a retried dispatch found its own pod), error.",
	}, []string{"cluster", "result"})

	// PodTransitions counts work-pod state changes written to the store.
	PodTransitions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "crucible_work_pod_transitions_total",
		Help: "Work-pod state changes by cluster and new state (running, succeeded, failed, cancelled, lost).",
	}, []string{"cluster", "state"})

	// LogCollections counts tier-1 log pulls by cluster and result.
	LogCollections = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "crucible_log_collections_total",
		Help: "Pulls of a finished pod's log into the log artifact, by cluster and result (ok, error).",
	}, []string{"cluster", "result"})

	// SweepDeletions counts pods the sweep deleted, by cluster and reason
	// (collected, orphaned); SweepSkips counts clusters skipped because their
	// list failed.
	SweepDeletions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "crucible_sweep_deletions_total",
		Help: "Pods deleted by the sweep, by cluster and reason: collected (terminal, log stored) or orphaned (no live row past the grace).",
	}, []string{"cluster", "reason"})
	SweepSkips = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "crucible_sweep_skipped_total",
		Help: "Sweeps skipped for a cluster because listing its pods failed; nothing is deleted there then.",
	}, []string{"cluster"})

	// WatchReconnects counts failed attempts to list or watch a cluster's
	// work pods, each followed by a reconnect after a backoff capped at a
	// few seconds. A steady rate means the spoke stays unreachable; rows
	// there move only once it is back.
	WatchReconnects = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "crucible_pod_watch_reconnects_total",
		Help: "Failed list or watch attempts of a cluster's work pods, each retried after a capped backoff.",
	}, []string{"cluster"})

	// ReconcileLost counts rows marked lost: their pod was confirmed gone by a
	// list that succeeded.
	ReconcileLost = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "crucible_reconcile_lost_total",
		Help: "Work pods marked lost because a successful list of their cluster did not contain them.",
	}, []string{"cluster"})

	// Redispatches counts rows a submit persisted but never dispatched (the
	// controller stopped between the two) that the startup reconcile found
	// without a pod, by what became of them.
	Redispatches = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "crucible_reconcile_redispatches_total",
		Help: "Rows persisted but never dispatched, found at startup without a pod, by outcome: dispatched from the row, failed, or left for a replay of the submit (secret files are not stored).",
	}, []string{"cluster", "outcome"})

	// Spills counts placed pods that waited unschedulable past their
	// class's spill_after, by the cluster they waited on and what became
	// of them: moved, or stayed (no other spoke could take them).
	Spills = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "crucible_placement_spills_total",
		Help: "Placed work pods past their class's spill_after, by the cluster they waited on and outcome: moved to another cluster, or stayed (none could take them now).",
	}, []string{"cluster", "outcome"})
)

func init() {
	Registry.MustRegister(TransientRetries, Dispatches, PodTransitions, LogCollections, SweepDeletions, SweepSkips, ReconcileLost, Redispatches, Spills, WatchReconnects)
}

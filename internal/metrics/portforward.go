package metrics

import "github.com/prometheus/client_golang/prometheus"

// Run-live metrics (R-RL1): the port-forward sessions the API relays to work
// pods on spokes (GET /api/pods/{pod}/portforward). Refusals by the session
// caps are crucible_budget_refusals_total's run_live_sessions and
// run_live_sessions_per_identity.
var (
	// PortForwardSessions counts sessions by cluster and how they ended:
	// caller_closed, pod_closed, pod_ended, idle, permission_gone,
	// write_timeout, spoke_failed (the spoke's stream broke or reported an
	// error), dial_failed (the spoke would not open one).
	PortForwardSessions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "crucible_portforward_sessions_total",
		Help: "Port-forward (run-live) sessions by cluster and outcome: caller_closed, pod_closed, pod_ended, idle, permission_gone, run_live_changed, max_session, write_timeout, spoke_failed, dial_failed.",
	}, []string{"cluster", "outcome"})
	// PortForwardOpen is the number of sessions open now.
	PortForwardOpen = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "crucible_portforward_sessions_open",
		Help: "Port-forward (run-live) sessions open now.",
	})
	// PortForwardBytes counts the bytes relayed, by direction: to_pod (from
	// the caller) and from_pod.
	PortForwardBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "crucible_portforward_bytes_total",
		Help: "Bytes relayed by port-forward (run-live) sessions, by direction: to_pod, from_pod.",
	}, []string{"direction"})
)

func init() { Registry.MustRegister(PortForwardSessions, PortForwardOpen, PortForwardBytes) }

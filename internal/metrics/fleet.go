package metrics

import "github.com/prometheus/client_golang/prometheus"

// Metrics of the spoke clients' health probes (package internal/fleet). The
// label "cluster" is the cluster's name in the profile.
var (
	// ClusterUp is what an operator alerts on first: 0 means dispatch, logs
	// and the drop-box's TokenReviews for that cluster are failing.
	ClusterUp = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "crucible_cluster_up",
		Help: "1 if the last health probe of the cluster succeeded (its API answered and accepted " +
			"the controller's token), 0 if it was unreachable or rejected the token. " +
			"crucible_cluster_probes_total's result says which.",
	}, []string{"cluster"})

	// ClusterTokenExpiry lets an operator alert before the controller's
	// token for a spoke expires (the kubelet should have rotated it long
	// before): alert on crucible_cluster_token_expiry_timestamp_seconds - time() < 600.
	ClusterTokenExpiry = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "crucible_cluster_token_expiry_timestamp_seconds",
		Help: "Expiry (Unix seconds, the exp claim) of the token the controller presents to the cluster, " +
			"read from its token file at the last health probe. Absent when the file is unreadable " +
			"or not a JWT with an exp claim.",
	}, []string{"cluster"})

	// ClusterProbes counts health probes by outcome.
	ClusterProbes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "crucible_cluster_probes_total",
		Help: "Health probes (a SelfSubjectReview) of a cluster by result: ok; unauthorized (401 or 403: " +
			"the cluster's authn webhook or RBAC rejects the controller's token); unreachable " +
			"(network error, timeout, 429 or 5xx); error (any other answer).",
	}, []string{"cluster", "result"})
)

func init() {
	Registry.MustRegister(ClusterUp, ClusterTokenExpiry, ClusterProbes)
}

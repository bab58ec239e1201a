package metrics

import "github.com/prometheus/client_golang/prometheus"

// Profile reload metrics: a spoke added, changed or removed at runtime.
var (
	// ProfileReloads counts reloads of the profile, by outcome: applied,
	// unchanged, invalid (the file does not parse or validate) and
	// restart_needed (it changes a key only a restart applies). Anything
	// but applied and unchanged left the running fleet as it was.
	ProfileReloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "crucible_profile_reloads_total",
		Help: "Profile reloads by outcome: applied, unchanged, invalid, restart_needed (the last two change nothing).",
	}, []string{"outcome"})
	// ClustersDraining is the number of clusters removed from the profile
	// whose live rows are still followed to their end.
	ClustersDraining = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "crucible_clusters_draining",
		Help: "Clusters removed from the profile whose live work pods are still followed until they end or the drain timeout.",
	})
)

func init() { Registry.MustRegister(ProfileReloads, ClustersDraining) }

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
	// ConfigReloads counts the reloads of every process's configuration
	// file (internal/reload), by component (controller: the profile,
	// webhook: the authn webhook's file) and outcome: applied, unchanged,
	// invalid (unreadable, or it does not parse or validate) and
	// restart_needed. The controller's series equal ProfileReloads, kept
	// for the dashboards that read it.
	ConfigReloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "crucible_config_reloads_total",
		Help: "Configuration file reloads by component (controller, webhook) and outcome: applied, unchanged, invalid, restart_needed (the last two change nothing).",
	}, []string{"component", "outcome"})
	// ClustersDraining is the number of clusters removed from the profile
	// whose live rows are still followed to their end.
	ClustersDraining = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "crucible_clusters_draining",
		Help: "Clusters removed from the profile whose live work pods are still followed until they end or the drain timeout.",
	})

	// ClusterProfiles counts the ClusterProfiles [fleet] cluster_profiles
	// reads, by what each made at the last change: spoke, refused (logged
	// with why) or not_listed (no access provider of crucible's).
	ClusterProfiles = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "crucible_cluster_profiles",
		Help: "ClusterProfiles in [fleet] cluster_profiles by outcome: spoke, refused (logged with the reason), not_listed (no crucible access provider).",
	}, []string{"outcome"})

	// SpokeLoops is 1 for each cluster whose reconcile loops run on this
	// replica: with leader_elect, the spokes whose Lease it holds. Summed
	// over the replicas it is 1 per cluster; 0 for longer than the lease
	// duration means nobody follows that cluster's pods.
	SpokeLoops = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "crucible_cluster_loops",
		Help: "1 while this replica runs the cluster's reconcile loops (with leader election: holds its Lease), else 0.",
	}, []string{"cluster"})
)

func init() {
	Registry.MustRegister(ProfileReloads, ConfigReloads, ClustersDraining, ClusterProfiles, SpokeLoops)
}

package fleet

import (
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Leader election defaults (R-C10): controller-runtime's and
// kube-controller-manager's durations. A replica that dies is replaced as
// leader within LeaseDuration; a leader cut off from the hub stops its loops
// within RenewDeadline, before anyone else may take over.
const (
	DefaultLeaseNamespace = "crucible"
	DefaultLeaseDuration  = 15 * time.Second
	DefaultRenewDeadline  = 10 * time.Second
	DefaultRetryPeriod    = 2 * time.Second
	// leaseJitter is client-go's JitterFactor: RenewDeadline must exceed
	// RetryPeriod by it.
	leaseJitter = 1.2
)

// LeaderElection is the Lease on the hub through which replicas sharing a
// PostgreSQL store pick the one that runs the loops that must run once
// (await, log collection, startup reconcile, sweep). It is used when
// [controller] leader_elect is true.
type LeaderElection struct {
	// LeaseName names the Lease; default controller.instance + "-leader",
	// so the replicas of one deployment (one instance) share one lease.
	LeaseName string `toml:"lease_name"`
	// LeaseNamespace is the Lease's hub namespace; the controller's service
	// account needs get, create and update on leases there.
	LeaseNamespace string `toml:"lease_namespace"`
	// LeaseDuration is how long others wait after the last renewal before
	// taking over; RenewDeadline how long the leader keeps trying to renew
	// before it gives up (and exits); RetryPeriod the time between tries.
	LeaseDuration Duration `toml:"lease_duration"`
	RenewDeadline Duration `toml:"renew_deadline"`
	RetryPeriod   Duration `toml:"retry_period"`
}

func (l *LeaderElection) applyDefaults(instance string) {
	setString(&l.LeaseName, instance+"-leader")
	setString(&l.LeaseNamespace, DefaultLeaseNamespace)
	setDuration(&l.LeaseDuration, DefaultLeaseDuration)
	setDuration(&l.RenewDeadline, DefaultRenewDeadline)
	setDuration(&l.RetryPeriod, DefaultRetryPeriod)
}

// validateLeader checks [leader_election] and that leader election has a
// store every replica shares.
func (p *Profile) validateLeader(ps *problems) {
	l := p.LeaderElection
	if !p.Controller.LeaderElect {
		return // the lease is not used
	}
	if !IsPostgres(p.Controller.Store) {
		ps.invalid("controller.leader_elect", "true", "needs a postgres:// store: SQLite is a file on one replica's disk (and its artifacts a local directory), "+
			"so replicas would each see their own work pods and artifacts; use PostgreSQL for more than one replica")
	}
	for _, msg := range validation.IsDNS1123Subdomain(l.LeaseName) {
		ps.invalid("leader_election.lease_name", l.LeaseName, msg)
	}
	dnsLabel(ps, "leader_election.lease_namespace", l.LeaseNamespace)
	positive(ps, "leader_election.lease_duration", l.LeaseDuration)
	positive(ps, "leader_election.renew_deadline", l.RenewDeadline)
	positive(ps, "leader_election.retry_period", l.RetryPeriod)
	if l.LeaseDuration.Duration <= 0 || l.RenewDeadline.Duration <= 0 || l.RetryPeriod.Duration <= 0 {
		return
	}
	if l.LeaseDuration.Duration <= l.RenewDeadline.Duration {
		ps.invalid("leader_election.renew_deadline", l.RenewDeadline.String(), "must be shorter than lease_duration")
	}
	if float64(l.RenewDeadline.Duration) <= leaseJitter*float64(l.RetryPeriod.Duration) {
		ps.invalid("leader_election.retry_period", l.RetryPeriod.String(), "must be shorter than renew_deadline / 1.2")
	}
}

// IsPostgres reports whether a store DSN names PostgreSQL.
func IsPostgres(dsn string) bool {
	lower := strings.ToLower(dsn)
	return strings.HasPrefix(lower, "postgres://") || strings.HasPrefix(lower, "postgresql://")
}

package profile

import (
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// leaseJitter is client-go's JitterFactor: RenewDeadline must exceed
// RetryPeriod by it.
const leaseJitter = 1.2

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
	// SingleLeader runs every spoke's loops on one leader, the holder of
	// the Lease lease_name, as before spokes were shared out (R-C10).
	// Without it (the default, R-FL1) each spoke's loops run on the replica
	// holding a Lease of that spoke (<lease_name>-spoke-<cluster>), with the
	// same durations, spread evenly over the live replicas (each keeps a
	// member Lease, <lease_name>-member-<hash>), and every store write of a
	// spoke's rows carries its lease's epoch, which the store refuses once
	// a newer owner has written; a replica that loses a spoke's lease stops
	// that spoke's loops and goes on with the others. The two ways must not
	// run side by side: a single leader's writes carry no epoch.
	SingleLeader bool `toml:"single_leader"`
}

// validateLeader checks [leader_election] and that leader election has a
// store every replica shares.
func validateLeader(p *Profile) field.ErrorList {
	if !p.Controller.LeaderElect {
		return nil // the lease is not used
	}
	var errs field.ErrorList
	if !IsPostgres(p.Controller.Store) {
		errs = append(errs, field.Invalid(field.NewPath("controller", "leader_elect"), true, "needs a postgres:// store: SQLite is a file on one replica's disk (and its artifacts a local directory), "+
			"so replicas would each see their own work pods and artifacts; use PostgreSQL for more than one replica"))
	}
	l, path := &p.LeaderElection, field.NewPath("leader_election")
	for _, msg := range validation.IsDNS1123Subdomain(l.LeaseName) {
		errs = append(errs, field.Invalid(path.Child("lease_name"), l.LeaseName, msg))
	}
	if !l.SingleLeader {
		// It prefixes the spokes' and members' Lease names and is their
		// label's value (or set single_leader).
		errs = append(errs, dnsLabel(path.Child("lease_name"), l.LeaseName)...)
		if l.LeaseDuration.Duration%time.Second != 0 {
			errs = append(errs, field.Invalid(path.Child("lease_duration"), l.LeaseDuration.Duration, "must be whole seconds: each spoke's Lease records seconds (or set single_leader)"))
		}
	}
	errs = append(errs, dnsLabel(path.Child("lease_namespace"), l.LeaseNamespace)...)
	errs = append(errs, positive(path.Child("lease_duration"), l.LeaseDuration)...)
	errs = append(errs, positive(path.Child("renew_deadline"), l.RenewDeadline)...)
	errs = append(errs, positive(path.Child("retry_period"), l.RetryPeriod)...)
	if l.LeaseDuration.Duration <= 0 || l.RenewDeadline.Duration <= 0 || l.RetryPeriod.Duration <= 0 {
		return errs
	}
	if l.LeaseDuration.Duration <= l.RenewDeadline.Duration {
		errs = append(errs, field.Invalid(path.Child("renew_deadline"), l.RenewDeadline.Duration, "must be shorter than lease_duration"))
	}
	if float64(l.RenewDeadline.Duration) <= leaseJitter*float64(l.RetryPeriod.Duration) {
		errs = append(errs, field.Invalid(path.Child("retry_period"), l.RetryPeriod.Duration, "must be shorter than renew_deadline / 1.2"))
	}
	return errs
}

// IsPostgres reports whether a store DSN names PostgreSQL.
func IsPostgres(dsn string) bool {
	lower := strings.ToLower(dsn)
	return strings.HasPrefix(lower, "postgres://") || strings.HasPrefix(lower, "postgresql://")
}

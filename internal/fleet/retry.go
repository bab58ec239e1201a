package fleet

import (
	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/retry"
)

// RetryPolicy is the backoff of every retried spoke operation: retry_initial,
// doubling up to max_backoff, for at most retry_budget. It lives here, not
// on profile.Reconcile, because package retry speaks client-go and the
// profile does not.
func RetryPolicy(r profile.Reconcile) retry.Policy {
	return retry.Policy{Initial: r.RetryInitial.Duration, Max: r.MaxBackoff.Duration, Budget: r.RetryBudget.Duration}
}

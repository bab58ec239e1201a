package fleet

import (
	"testing"

	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/retry"
)

func TestRetryPolicy(t *testing.T) {
	got := RetryPolicy(profile.Default().Reconcile)
	want := retry.Policy{Initial: profile.DefaultRetryInitial, Max: profile.DefaultMaxBackoff, Budget: profile.DefaultRetryBudget}
	if got != want {
		t.Errorf("RetryPolicy() = %+v, want %+v", got, want)
	}
}

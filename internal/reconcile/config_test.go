package reconcile

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"crucible.dev/crucible/internal/dispatch"
	"crucible.dev/crucible/internal/fleet"
	"crucible.dev/crucible/internal/profile"
)

// The reconciler has no defaults of its own: Start refuses every profile
// value it lacks at once, and takes profile's defaults as they are.
func TestStartRefusesUnconfigured(t *testing.T) {
	err := (&Reconciler{Dispatcher: &dispatch.Dispatcher{}}).Start(t.Context())
	if !errors.Is(err, ErrUnconfigured) {
		t.Fatalf("Start = %v, want ErrUnconfigured", err)
	}
	want := []string{
		"reconciler not configured from the profile: reconcile.workers (Workers) must be positive",
		"reconciler not configured from the profile: reconcile.sweep_page (SweepPage) must be positive",
		"reconciler not configured from the profile: the retry policy (Retry) must be positive",
		"reconciler not configured from the profile: pods.max_log_bytes (Dispatcher.Pods) must be positive",
	}
	if diff := cmp.Diff(want, strings.Split(err.Error(), "\n")); diff != "" {
		t.Errorf("Start error (-want +got):\n%s", diff)
	}

	d := profile.Default()
	r := &Reconciler{
		Dispatcher: &dispatch.Dispatcher{Pods: d.Pods}, Retry: fleet.RetryPolicy(d.Reconcile),
		Workers: d.Reconcile.Workers, SweepPage: d.Reconcile.SweepPage,
	}
	if err := r.validate(); err != nil {
		t.Errorf("validate with profile's defaults = %v, want nil", err)
	}
}

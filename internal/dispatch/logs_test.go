package dispatch

import (
	"errors"
	"io"
	"testing"

	"crucible.dev/crucible/internal/fleet"
	"crucible.dev/crucible/internal/profile"
)

// A dispatcher without the profile's [pods] section has no log bound and
// reads no log, rather than pick a bound of its own.
func TestLogsRefusesWithoutBound(t *testing.T) {
	d := &Dispatcher{}
	p := fleet.RetryPolicy(profile.Default().Reconcile)
	err := d.Logs(t.Context(), p, "wharf", "loops", "wp-1", func(io.Reader) error {
		t.Error("a log was read without a bound")
		return nil
	})
	if !errors.Is(err, ErrNoLogBound) {
		t.Errorf("Logs = %v, want ErrNoLogBound", err)
	}
}

package reconcile

import (
	"context"
	"fmt"
	"time"

	"crucible.dev/crucible/internal/store"
)

// drainPoll is how often Drain counts a draining cluster's live rows: the
// loops it waits for end them, and a few seconds late is no harm to a
// cluster on its way out.
const drainPoll = 2 * time.Second

// Drain follows a cluster removed from the profile to its end: its loops
// keep running (the caller's RunCluster), so its live rows go on to their
// outcome and their logs are collected, while nothing new is dispatched
// to it (it is in no profile the API reads). Once timeout has passed since
// the drain began, the rows still live are marked lost, with a reason that
// says so. It returns the number lost when no live row is left, or ctx's
// error.
func (r *Reconciler) Drain(ctx context.Context, cluster string, timeout time.Duration) (lost int, err error) {
	deadline := time.Now().Add(timeout)
	reason := fmt.Sprintf("cluster %s was removed from the profile and this pod did not end within its drain timeout (%s)", cluster, timeout)
	for {
		rows, err := r.Store.ListWorkPods(ctx, store.Filter{Cluster: cluster, States: store.LiveStates, WithoutSpec: true, Limit: startupPage})
		switch {
		case ctx.Err() != nil:
			return lost, ctx.Err()
		case err != nil:
			r.logger().Error("drain: list live rows", "cluster", cluster, "error", err)
		case len(rows) == 0:
			return lost, nil
		case !time.Now().Before(deadline):
			for _, row := range rows {
				if err := r.markLost(ctx, row.ID, reason); err != nil {
					r.logger().Error("drain: mark lost", "cluster", cluster, "pod", row.ID, "error", err)
					continue
				}
				lost++
			}
		}
		t := time.NewTimer(drainPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return lost, ctx.Err()
		case <-t.C:
		}
	}
}

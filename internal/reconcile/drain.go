package reconcile

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"

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
// says so, and their pods deleted: the sweep would delete a lost row's pod
// (an orphan), but it ends with the drain and the cluster's client, and a
// pod left running user code (holding a GPU) on a spoke nobody watches any
// more is one nothing would ever remove. It returns the number lost when
// no live row is left, or ctx's error.
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
			var marked []store.WorkPod
			for _, row := range rows {
				ok, err := r.markLost(ctx, row.ID, reason)
				if err != nil {
					r.logger().Error("drain: mark lost", "cluster", cluster, "pod", row.ID, "error", err)
					continue
				}
				if ok { // else it ended meanwhile: its loops collect it
					lost++
					marked = append(marked, row)
				}
			}
			r.deleteDrained(ctx, cluster, marked)
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

// deleteDrained deletes the pods of rows its drain marked lost, those that
// had one (a pod uid: created), as the sweep deletes an orphan (deletePod).
// The rows are marked first and the deletes stop at the first failure,
// logging what is left: a spoke is often removed because it no longer
// answers, and a delete per pod waiting out its bound would hold the drain
// (and the spoke's client) for minutes. The rows' verdicts stand either way.
func (r *Reconciler) deleteDrained(ctx context.Context, cluster string, rows []store.WorkPod) {
	for i, row := range rows {
		if row.PodUID == "" {
			continue
		}
		if _, err := r.deletePod(ctx, cluster, row.Namespace, row.ID, types.UID(row.PodUID)); err != nil {
			r.logger().Warn("drain: cannot delete the pods of rows marked lost; leaving them", "cluster", cluster,
				"pod", row.ID, "left", len(rows)-i, "error", err)
			return
		}
		r.logger().Info("drain deleted the pod of a row marked lost", "cluster", cluster, "pod", row.ID)
	}
}

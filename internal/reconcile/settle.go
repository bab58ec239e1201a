package reconcile

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"crucible.dev/crucible/internal/retry"
	"crucible.dev/crucible/internal/store"
	"crucible.dev/crucible/internal/workpod"
)

// Settle brings the row of work pod id up to date with its pod as its spoke
// has it now: one GET through the cluster's shared client instead of the
// informer's cache, then the very action the pod's watch event would cause
// (decideSync), a finished pod's log collection included. A live log's end
// event needs it: the log can end while the watch of a spoke that just came
// back has not resumed yet, and the row would still say running. It returns
// the row as it is then; a row that is terminal already is returned as it
// is, without asking the spoke.
func (r *Reconciler) Settle(ctx context.Context, id string) (store.WorkPod, error) {
	row, err := r.Store.GetWorkPod(ctx, id)
	if err != nil || row.State.Terminal() {
		return row, err
	}
	c, ok := r.Clients.Get(row.Cluster)
	if !ok {
		return row, fmt.Errorf("work pod %s: cluster %q is not in the fleet", id, row.Cluster)
	}
	pod, err := c.Kube.CoreV1().Pods(row.Namespace).Get(ctx, id, metav1.GetOptions{})
	f := syncFacts{Cluster: row.Cluster, Row: &row}
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return row, fmt.Errorf("get pod %s on %s: %w", id, row.Cluster, retry.NotReady(ctx, c.Kube.CoreV1().RESTClient(), err))
	case pod.Labels[workpod.LabelManagedBy] == workpod.ManagedByValue && pod.Labels[workpod.LabelInstance] == r.Instance:
		f.Pod = newCachedPod(pod) // what the informer, which selects by these labels, would hold
	}
	if err := r.act(ctx, f); err != nil {
		return row, err
	}
	return r.Store.GetWorkPod(ctx, id)
}

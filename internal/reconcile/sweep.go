package reconcile

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"crucible.dev/crucible/internal/fleet"
	"crucible.dev/crucible/internal/metrics"
	"crucible.dev/crucible/internal/retry"
)

// sweepListTimeout bounds a sweep's list of one page, retries included.
const sweepListTimeout = 15 * time.Second

// sweepDeleteTimeout bounds one delete of the sweep, retries included. An
// API server that stops answering between the list and a delete would
// otherwise hold the delete until the connection's health check gives up.
const sweepDeleteTimeout = 10 * time.Second

// deletePod deletes the pod name if it is still the one with uid, within
// sweepDeleteTimeout (retries included), as the sweep, max_pending and a
// drain delete pods; timedOut says the bound (or ctx) ended it.
func (r *Reconciler) deletePod(ctx context.Context, cluster, namespace, name string, uid types.UID) (timedOut bool, err error) {
	dctx, cancel := context.WithTimeout(ctx, sweepDeleteTimeout)
	defer cancel()
	err = r.Dispatcher.Delete(dctx, cluster, namespace, name, uid)
	return err != nil && dctx.Err() != nil, err
}

// sweepLoop sweeps one cluster every SweepInterval. Each cluster has a loop
// of its own: one whose API server hangs never delays the sweep of another.
func (r *Reconciler) sweepLoop(ctx context.Context, cluster string) {
	_ = wait.PollUntilContextCancel(ctx, r.SweepInterval, false, func(ctx context.Context) (bool, error) {
		r.Sweep(ctx, cluster)
		return false, nil
	})
}

// Sweep deletes, on one cluster, this instance's pods that are finished and
// collected, or orphaned (no live row) for longer than the grace. It acts only
// on a fresh, successful list of the cluster — never on a cache that may be
// stale after an outage — and only on pods that carry crucible's labels. The
// list is read a page at a time, each page acted on before the next is
// read (all pages are of one snapshot); a page that cannot be read ends this
// sweep, and what earlier pages deleted was judged on a successful list. A
// delete that times out ends it too: the cluster stopped answering, and each
// further delete would wait out its bound; the next sweep judges the rest.
func (r *Reconciler) Sweep(ctx context.Context, cluster string) {
	c, ok := r.Clients.Get(cluster)
	if !ok {
		return
	}
	if r.SweepPage <= 0 {
		// Start refuses this; a caller of Sweep alone gets the same answer,
		// never a list of the whole cluster at once.
		r.Log.Error("sweep skipped: SweepPage is not set (the profile's reconcile.sweep_page)", "cluster", cluster)
		return
	}
	opts := metav1.ListOptions{LabelSelector: Selector(r.Instance).String(), Limit: r.SweepPage}
	for {
		list, err := r.listPage(ctx, c, opts)
		if err != nil {
			metrics.SweepSkips.WithLabelValues(cluster).Inc()
			r.Log.Warn("sweep skipped: list failed", "cluster", cluster, "error", err)
			return
		}
		verdicts := r.verdicts(ctx, cluster, list.Items)
		for i := range list.Items {
			if !r.sweepPod(ctx, cluster, &list.Items[i].ObjectMeta, verdicts[i]) {
				return
			}
		}
		if list.Continue == "" {
			return
		}
		opts.Continue = list.Continue
	}
}

// listPage lists the metadata of one page of cluster c's pods: names,
// labels, uids and times are all the sweep decides on, and with thousands of
// pods held, whole pods cost the API server and the controller several
// times as much to encode and decode each sweep. An API server that takes
// connections and never answers (a host gone from the network) would hold
// an unbounded list for good: the page's list is bounded, retries included.
func (r *Reconciler) listPage(ctx context.Context, c *fleet.Client, opts metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
	lctx, cancel := context.WithTimeout(ctx, sweepListTimeout)
	defer cancel()
	var list *metav1.PartialObjectMetadataList
	err := retry.Do(lctx, retry.Policy{Initial: r.Retry.Initial, Max: r.Retry.Max, Budget: 5 * time.Second}, "list-pods", func(ctx context.Context) error {
		var err error
		list, err = c.Metadata.Resource(corev1.SchemeGroupVersion.WithResource("pods")).Namespace(c.Entry.LoopNamespace).List(ctx, opts)
		return err
	})
	return list, err
}

// sweepPod deletes one listed pod if the sweep's verdict says so. It
// reports whether the sweep may go on: not after a delete that timed out.
func (r *Reconciler) sweepPod(ctx context.Context, cluster string, pod *metav1.ObjectMeta, reason sweepVerdict) bool {
	if reason == sweepKeep {
		return true
	}
	if timedOut, err := r.deletePod(ctx, cluster, pod.Namespace, pod.Name, pod.UID); err != nil {
		r.Log.Warn("sweep: delete failed", "cluster", cluster, "pod", pod.Name, "error", err)
		return !timedOut
	}
	metrics.SweepDeletions.WithLabelValues(cluster, string(reason)).Inc()
	r.Log.Info("sweep deleted pod", "cluster", cluster, "pod", pod.Name, "reason", reason)
	return true
}

// verdicts reads what the sweep needs about a listed page of pods, then
// decides each (decideSweep).
func (r *Reconciler) verdicts(ctx context.Context, cluster string, pods []metav1.PartialObjectMetadata) []sweepVerdict {
	facts := r.readSweep(ctx, cluster, pods)
	out := make([]sweepVerdict, len(facts))
	now := time.Now()
	for i, f := range facts {
		out[i] = decideSweep(f, r.Instance, r.OrphanGrace, now)
	}
	return out
}

// readSweep gathers the rows named like a page's listed pods, for the pods
// the sweep may consider at all, in one read of the store (a page is 500
// pods; one read per pod cost the store a query each, every sweep). Rows
// that cannot be read leave every pod of the page unknown: kept.
func (r *Reconciler) readSweep(ctx context.Context, cluster string, pods []metav1.PartialObjectMetadata) []sweepFacts {
	facts := make([]sweepFacts, len(pods))
	var names []string
	for i := range pods {
		facts[i] = sweepFacts{Cluster: cluster, Pod: &pods[i].ObjectMeta}
		if sweepable(&pods[i].ObjectMeta, r.Instance) {
			names = append(names, pods[i].Name)
		} else {
			facts[i].RowUnknown = true // not asked
		}
	}
	if len(names) == 0 {
		return facts
	}
	rows, err := r.Store.GetWorkPods(ctx, names)
	if err != nil {
		r.Log.Warn("sweep: reading the rows of a page failed; its pods are kept", "cluster", cluster, "pods", len(names), "error", err)
	}
	for i := range facts {
		switch row, ok := rows[pods[i].Name]; {
		case facts[i].RowUnknown:
		case err != nil:
			facts[i].RowUnknown = true
		case ok:
			facts[i].Row = &row
		}
	}
	return facts
}

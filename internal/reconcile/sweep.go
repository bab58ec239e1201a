package reconcile

import (
	"context"
	"errors"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"crucible.dev/crucible/internal/fleet"
	"crucible.dev/crucible/internal/metrics"
	"crucible.dev/crucible/internal/retry"
	"crucible.dev/crucible/internal/store"
)

// sweepListTimeout bounds a sweep's list of one page, retries included.
const sweepListTimeout = 15 * time.Second

// sweepPage is how many pods one list request of the sweep returns: the
// sweep holds one page of full pods at a time, never a cluster's 50,000
// (hundreds of MiB decoded).
const sweepPage = 500

func (r *Reconciler) sweepLoop(ctx context.Context) {
	t := time.NewTicker(r.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			// Clusters are swept side by side: one whose API server hangs
			// delays the others by at most its list's bound, not forever.
			var wg sync.WaitGroup
			for _, c := range r.Clients.All() {
				wg.Go(func() { r.Sweep(ctx, c.Entry.Name) })
			}
			wg.Wait()
		}
	}
}

// Sweep deletes, on one cluster, this instance's pods that are finished and
// collected, or orphaned (no live row) for longer than the grace. It acts only
// on a fresh, successful list of the cluster — never on a cache that may be
// stale after an outage — and only on pods that carry crucible's labels. The
// list is read a page at a time, each page acted on before the next is
// read (all pages are of one snapshot); a page that cannot be read ends this
// sweep, and what earlier pages deleted was judged on a successful list.
func (r *Reconciler) Sweep(ctx context.Context, cluster string) {
	c, ok := r.Clients.Get(cluster)
	if !ok {
		return
	}
	opts := metav1.ListOptions{LabelSelector: Selector(r.Instance).String(), Limit: sweepPage}
	for {
		list, err := r.listPage(ctx, c, opts)
		if err != nil {
			metrics.SweepSkips.WithLabelValues(cluster).Inc()
			r.Log.Warn("sweep skipped: list failed", "cluster", cluster, "error", err)
			return
		}
		for i := range list.Items {
			r.sweepPod(ctx, cluster, &list.Items[i])
		}
		if list.Continue == "" {
			return
		}
		opts.Continue = list.Continue
	}
}

// listPage lists one page of cluster c's pods. An API server that takes
// connections and never answers (a host gone from the network) would hold an
// unbounded list for good: the page's list is bounded, retries included.
func (r *Reconciler) listPage(ctx context.Context, c *fleet.Client, opts metav1.ListOptions) (*corev1.PodList, error) {
	lctx, cancel := context.WithTimeout(ctx, sweepListTimeout)
	defer cancel()
	var list *corev1.PodList
	err := retry.Do(lctx, retry.Policy{Initial: r.Retry.Initial, Max: r.Retry.Max, Budget: 5 * time.Second}, "list-pods", func(ctx context.Context) error {
		var err error
		list, err = c.Kube.CoreV1().Pods(c.Entry.LoopNamespace).List(ctx, opts)
		return err
	})
	return list, err
}

// sweepPod deletes one listed pod if the sweep's verdict says so.
func (r *Reconciler) sweepPod(ctx context.Context, cluster string, pod *corev1.Pod) {
	reason := r.verdict(ctx, cluster, pod)
	if reason == sweepKeep {
		return
	}
	if err := r.Dispatcher.Delete(ctx, cluster, pod.Namespace, pod.Name, pod.UID); err != nil {
		r.Log.Warn("sweep: delete failed", "cluster", cluster, "pod", pod.Name, "error", err)
		return
	}
	metrics.SweepDeletions.WithLabelValues(cluster, string(reason)).Inc()
	r.Log.Info("sweep deleted pod", "cluster", cluster, "pod", pod.Name, "reason", reason)
}

// verdict reads what the sweep needs about pod, then decides (decideSweep).
func (r *Reconciler) verdict(ctx context.Context, cluster string, pod *corev1.Pod) sweepVerdict {
	return decideSweep(r.readSweep(ctx, cluster, pod), r.Instance, r.OrphanGrace, time.Now())
}

// readSweep gathers the row named like a listed pod, if the pod is one the
// sweep may consider at all.
func (r *Reconciler) readSweep(ctx context.Context, cluster string, pod *corev1.Pod) sweepFacts {
	f := sweepFacts{Cluster: cluster, Pod: pod}
	if !sweepable(pod, r.Instance) {
		f.RowUnknown = true // not asked
		return f
	}
	row, err := r.Store.GetWorkPod(ctx, pod.Name)
	switch {
	case err == nil:
		f.Row = &row
	case !errors.Is(err, store.ErrNotFound):
		f.RowUnknown = true
	}
	return f
}

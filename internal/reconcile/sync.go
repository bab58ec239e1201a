package reconcile

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"

	"crucible.dev/crucible/internal/artifact"
	"crucible.dev/crucible/internal/ingest"
	"crucible.dev/crucible/internal/metrics"
	"crucible.dev/crucible/internal/store"
)

// LogBlobs is where collected logs go: artifact.Dir with SQLite,
// pgblob.Blobs with PostgreSQL. Write stages and commits under the digest;
// Remove drops the bytes of a claim another replica won.
type LogBlobs interface {
	Write(ctx context.Context, podID, kind string, r io.Reader, limit int64) (artifact.Written, error)
	Remove(ctx context.Context, podID, kind, digest string) error
}

func (r *Reconciler) uploads() ingest.Uploads {
	if r.Uploads == nil {
		return ingest.NoUploads{}
	}
	return r.Uploads
}

func (r *Reconciler) logger() *slog.Logger {
	if r.Log == nil {
		return slog.Default()
	}
	return r.Log
}

// sync reads the row and the pod, decides with decideSync, then acts; a
// row whose dispatch runs in this process is synced once that dispatch has
// recorded it (Dispatching).
func (r *Reconciler) sync(ctx context.Context, k key) error {
	if r.inflight.putOff(k.Cluster, k.Name) {
		return nil
	}
	f, err := r.readSync(ctx, k)
	if err != nil {
		return err
	}
	return r.act(ctx, f)
}

// act records a pod already on the spoke as dispatched (recordDispatched),
// then what the pod shows of its start and why it waits, when its
// row has not (observation), moves a placed pod unschedulable past its
// class's spill_after (enforceSpill) or gives up on one past its
// max_pending (enforceMaxPending), then does what decideSync
// decides for f: a moment is recorded before the state change it led to.
func (r *Reconciler) act(ctx context.Context, f syncFacts) error {
	if err := r.recordDispatched(ctx, &f); err != nil {
		return err
	}
	if o, ok := observation(f); ok {
		row, _, err := r.Store.ObservePod(ctx, f.Row.ID, o)
		if err != nil {
			return err
		}
		row.Spec = f.Row.Spec
		f.Row = &row
	}
	if done, err := r.enforceSpill(ctx, f); done || err != nil {
		return err
	}
	if done, err := r.enforceMaxPending(ctx, f); done || err != nil {
		return err
	}
	switch a := decideSync(f); a.Op {
	case syncLose:
		_, err := r.markLost(ctx, f.Row.ID, a.Reason)
		return err
	case syncFinish:
		return r.finish(ctx, *f.Row, f.Pod)
	case syncAdvance:
		_, _, err := r.transition(ctx, f.Row.ID, f.Pod, a.State)
		return err
	case syncLeave:
	}
	return nil
}

// recordDispatched moves a row the dispatcher has not yet marked dispatched
// to dispatched when its pod is already on the spoke (the watch can see the
// pod, and the scheduler's verdict on it, before the dispatcher has created
// the pod's ConfigMap and Secret), so that the history says dispatched
// before anything the pod shows of its wait or start.
func (r *Reconciler) recordDispatched(ctx context.Context, f *syncFacts) error {
	if f.Row == nil || f.Row.State != store.StatePending || decideSync(*f).Op != syncAdvance {
		return nil
	}
	row, changed, err := r.transition(ctx, f.Row.ID, f.Pod, store.StateDispatched)
	if err == nil && !changed {
		// Moved on meanwhile (a dispatch's record, a cancel): as it is now.
		row, err = r.Store.GetWorkPod(ctx, f.Row.ID)
	}
	if err != nil {
		return err
	}
	f.Row = &row
	return nil
}

// readSync gathers the row named by k and the pod in k's cluster's informer
// cache. An error is one of reading (requeued with backoff), never a verdict.
func (r *Reconciler) readSync(ctx context.Context, k key) (syncFacts, error) {
	f := syncFacts{Cluster: k.Cluster}
	row, err := r.Store.GetWorkPod(ctx, k.Name)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return f, nil
	case err != nil:
		return f, err
	}
	f.Row = &row
	if row.Cluster != k.Cluster {
		return f, nil // not this cluster's row: its cache is not asked
	}
	pod, err := r.cache(k.Cluster).get(k.Name)
	if err != nil {
		return f, err
	}
	f.Pod = pod
	return f, nil
}

// transition moves a live row forward (pending → dispatched → running) and
// records the pod's uid; it never moves a row backwards (advance). It
// returns the row it wrote; changed is false, and the row zero, when the
// row needed no change.
func (r *Reconciler) transition(ctx context.Context, id string, pod *cachedPod, to store.State) (row store.WorkPod, changed bool, err error) {
	row, err = r.Store.UpdateWorkPod(ctx, id, func(p *store.WorkPod) error {
		if !advance(p, pod.UID, to) {
			return errSkip
		}
		return nil
	})
	switch {
	case errors.Is(err, errSkip):
		return store.WorkPod{}, false, nil
	case err != nil:
		return store.WorkPod{}, false, err
	}
	if row.State == to {
		metrics.PodTransitions.WithLabelValues(row.Cluster, string(to)).Inc()
	}
	return row, true, nil
}

// finish stores the finished pod's log as the log artifact, then records the
// outcome. The row says LogCollected only once the artifact is stored, and
// the sweep deletes only collected pods: the log cannot be lost to a delete.
// decideSync has ruled out a row that recorded its outcome already.
func (r *Reconciler) finish(ctx context.Context, row store.WorkPod, pod *cachedPod) error {
	if err := r.collectLog(ctx, row, pod); err != nil {
		metrics.LogCollections.WithLabelValues(row.Cluster, "error").Inc()
		return err // requeued with backoff; the pod stays until collected
	}
	metrics.LogCollections.WithLabelValues(row.Cluster, "ok").Inc()
	state, exit, reason := outcome(pod)
	updated, err := r.Store.UpdateWorkPod(ctx, row.ID, func(p *store.WorkPod) error {
		recordOutcome(p, pod.UID, state, exit, reason, time.Now().UTC())
		return nil
	})
	if err != nil {
		return err
	}
	r.uploads().Forget(row.ID)
	if updated.State == state {
		metrics.PodTransitions.WithLabelValues(row.Cluster, string(state)).Inc()
	}
	return nil
}

// logRetryBudget is how long one sync retries a finished pod's log before
// it gives the worker back and the row is requeued with backoff. A spoke
// that cannot serve logs (its node has no address, its kubelet is gone)
// would otherwise hold each of the cluster's workers for the whole retry
// budget per finished pod, and the cluster's other rows — a running pod's
// uid, which its pushes wait for — would wait behind them. It bounds the
// retries, not a transfer: a large log takes as long as it takes.
const logRetryBudget = 15 * time.Second

func (r *Reconciler) collectLog(ctx context.Context, row store.WorkPod, pod *cachedPod) error {
	p := r.Dispatcher.Retry
	p.Budget = min(p.Budget, logRetryBudget)
	return r.storeLog(ctx, row.ID, r.Dispatcher.Pods.MaxLogBytes, func(consume func(io.Reader) error) error {
		return r.Dispatcher.Logs(ctx, p, row.Cluster, pod.Namespace, pod.Name, consume)
	})
}

// storeLog pulls the log, at most limit bytes, through fetch into a
// content-addressed file and claims kind "log" for the controller. Only a
// controller-written record counts as collected: a "log" a pod recorded
// (possible before pods were refused controller-owned kinds) is replaced by
// the real one, never taken for it.
func (r *Reconciler) storeLog(ctx context.Context, podID string, limit int64, fetch func(consume func(io.Reader) error) error) error {
	prev, err := r.Store.GetArtifact(ctx, podID, artifact.LogKind)
	switch {
	case err == nil && prev.Source == store.SourceController:
		return nil // stored before a crash; the file its digest names is there
	case err == nil:
		r.logger().Warn("log artifact recorded by the pod, not the controller; collecting the real one", "pod", podID)
	case !errors.Is(err, store.ErrNotFound):
		return err
	}
	var w artifact.Written
	err = fetch(func(log io.Reader) error {
		var err error
		w, err = r.Artifacts.Write(ctx, podID, artifact.LogKind, log, limit)
		return err
	})
	if err != nil {
		return err
	}
	_, err = r.Store.PutArtifact(ctx, store.Artifact{PodID: podID, Kind: artifact.LogKind, Size: w.Size, SHA256: w.SHA256, Source: store.SourceController}, store.Quota{})
	if errors.Is(err, store.ErrConflict) {
		// Another replica's collection won with other bytes (the log grew
		// between the two reads): its record stands, this file is not it.
		if rerr := r.Artifacts.Remove(context.WithoutCancel(ctx), podID, artifact.LogKind, w.SHA256); rerr != nil {
			r.logger().Warn("removing an unrecorded log file failed", "pod", podID, "error", rerr)
		}
		return nil
	}
	return err
}

// outcome reads the verdict from the work container's terminated state.
func outcome(pod *cachedPod) (store.State, *int32, string) {
	state := store.StateSucceeded
	if pod.Phase == corev1.PodFailed {
		state = store.StateFailed
	}
	if t := pod.Terminated; t != nil {
		code := t.ExitCode
		reason := ""
		switch {
		case state != store.StateFailed:
		case pod.Reason != "":
			// The pod's own reason (DeadlineExceeded, Evicted) is why it
			// failed; its container's ("Error", 137) only how it ended.
			reason = joinReason(pod.Reason, pod.Message)
		default:
			reason = joinReason(t.Reason, t.Message)
		}
		return state, &code, reason
	}
	return state, nil, joinReason(pod.Reason, pod.Message)
}

func joinReason(reason, message string) string {
	if message != "" {
		return reason + ": " + message
	}
	return reason
}

package reconcile

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"crucible.dev/crucible/internal/artifact"
	"crucible.dev/crucible/internal/dispatch"
	"crucible.dev/crucible/internal/metrics"
	"crucible.dev/crucible/internal/store"
)

// LogKind is the artifact kind of the tier-1 log (R-C7).
const LogKind = artifact.LogKind

// Uploads is the drop-box as log collection sees it: once a pod's log is
// collected it takes no more uploads, and Forget drops what it remembers of
// the pod (its cached accepts).
type Uploads interface{ Forget(podID string) }

// LogBlobs is where collected logs go: artifact.Dir with SQLite,
// pgblob.Blobs with PostgreSQL. Write stages and commits under the digest;
// Remove drops the bytes of a claim another replica won.
type LogBlobs interface {
	Write(ctx context.Context, podID, kind string, r io.Reader, limit int64) (artifact.Written, error)
	Remove(ctx context.Context, podID, kind, digest string) error
}

// noUploads is the Uploads of a reconciler without a drop-box.
type noUploads struct{}

func (noUploads) Forget(string) {}

var _ Uploads = noUploads{}

func (r *Reconciler) uploads() Uploads {
	if r.Uploads == nil {
		return noUploads{}
	}
	return r.Uploads
}

func (r *Reconciler) logger() *slog.Logger {
	if r.Log == nil {
		return slog.Default()
	}
	return r.Log
}

// sync reads the row and the pod, then decides (read, then act).
func (r *Reconciler) sync(ctx context.Context, k key) error {
	row, err := r.Store.GetWorkPod(ctx, k.Name)
	if errors.Is(err, store.ErrNotFound) {
		return nil // no row: an orphan, the sweep's business
	}
	if err != nil {
		return err
	}
	if row.Cluster != k.Cluster {
		return nil // a same-named pod on another cluster is not this row's
	}
	pod, err := r.lister(k.Cluster).Get(k.Name)
	switch {
	case apierrors.IsNotFound(err):
		if row.State.Live() && row.PodUID != "" {
			// Deleted on the spoke before it finished; the informer saw it go.
			return r.markLost(ctx, row.ID, "pod deleted on "+row.Cluster+" before it finished")
		}
		return nil
	case err != nil:
		return err
	}
	if row.PodUID != "" && row.PodUID != string(pod.UID) {
		return nil // an older or foreign pod of that name; the sweep decides
	}
	switch pod.Status.Phase {
	case corev1.PodSucceeded, corev1.PodFailed:
		return r.finish(ctx, row, pod)
	case corev1.PodRunning:
		return r.transition(ctx, row.ID, pod, store.StateRunning)
	default:
		return r.transition(ctx, row.ID, pod, store.StateDispatched)
	}
}

// liveRank orders the live states; a row only ever moves up it.
var liveRank = map[store.State]int{store.StatePending: 0, store.StateDispatched: 1, store.StateRunning: 2}

// transition moves a live row forward (pending → dispatched → running) and
// records the pod's uid; it never moves a row backwards.
func (r *Reconciler) transition(ctx context.Context, id string, pod *corev1.Pod, to store.State) error {
	row, err := r.Store.UpdateWorkPod(ctx, id, func(p *store.WorkPod) error {
		cur, live := liveRank[p.State]
		if !live || (cur >= liveRank[to] && p.PodUID != "") {
			return errSkip
		}
		p.PodUID = string(pod.UID)
		if liveRank[to] > cur {
			p.State = to
		}
		return nil
	})
	if errors.Is(err, errSkip) {
		return nil
	}
	if err == nil && row.State == to {
		metrics.PodTransitions.WithLabelValues(row.Cluster, string(to)).Inc()
	}
	return err
}

// finish stores the finished pod's log as the log artifact, then records the
// outcome. The row says LogCollected only once the artifact is stored, and
// the sweep deletes only collected pods: the log cannot be lost to a delete.
func (r *Reconciler) finish(ctx context.Context, row store.WorkPod, pod *corev1.Pod) error {
	if row.State.Terminal() && (row.LogCollected || row.State == store.StateCancelled) {
		return nil
	}
	if err := r.collectLog(ctx, row, pod); err != nil {
		metrics.LogCollections.WithLabelValues(row.Cluster, "error").Inc()
		return err // requeued with backoff; the pod stays until collected
	}
	metrics.LogCollections.WithLabelValues(row.Cluster, "ok").Inc()
	state, exit, reason := outcome(pod)
	updated, err := r.Store.UpdateWorkPod(ctx, row.ID, func(p *store.WorkPod) error {
		p.LogCollected = true
		p.PodUID = string(pod.UID)
		if p.State.Terminal() {
			return nil // cancelled or lost meanwhile: keep that verdict
		}
		now := time.Now().UTC()
		p.State, p.ExitCode, p.Reason, p.FinishedAt = state, exit, reason, &now
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

func (r *Reconciler) collectLog(ctx context.Context, row store.WorkPod, pod *corev1.Pod) error {
	return r.storeLog(ctx, row.ID, func(consume func(io.Reader) error) error {
		return r.Dispatcher.Logs(ctx, row.Cluster, pod.Namespace, pod.Name, consume)
	})
}

// storeLog pulls the log through fetch into a content-addressed file and
// claims kind "log" for the controller. Only a controller-written record
// counts as collected: a "log" a pod recorded (possible before pods were
// refused controller-owned kinds) is replaced by the real one, never taken
// for it.
func (r *Reconciler) storeLog(ctx context.Context, podID string, fetch func(consume func(io.Reader) error) error) error {
	prev, err := r.Store.GetArtifact(ctx, podID, LogKind)
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
		w, err = r.Artifacts.Write(ctx, podID, LogKind, log, dispatch.MaxLogBytes)
		return err
	})
	if err != nil {
		return err
	}
	_, err = r.Store.PutArtifact(ctx, store.Artifact{PodID: podID, Kind: LogKind, Size: w.Size, SHA256: w.SHA256, Source: store.SourceController}, store.Quota{})
	if errors.Is(err, store.ErrConflict) {
		// Another replica's collection won with other bytes (the log grew
		// between the two reads): its record stands, this file is not it.
		if rerr := r.Artifacts.Remove(context.WithoutCancel(ctx), podID, LogKind, w.SHA256); rerr != nil {
			r.logger().Warn("removing an unrecorded log file failed", "pod", podID, "error", rerr)
		}
		return nil
	}
	return err
}

// outcome reads the verdict from the work container's terminated state.
func outcome(pod *corev1.Pod) (store.State, *int32, string) {
	state := store.StateSucceeded
	if pod.Status.Phase == corev1.PodFailed {
		state = store.StateFailed
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil {
			code := t.ExitCode
			reason := ""
			if state == store.StateFailed {
				reason = t.Reason
				if t.Message != "" {
					reason += ": " + t.Message
				}
			}
			return state, &code, reason
		}
	}
	reason := pod.Status.Reason
	if pod.Status.Message != "" {
		reason += ": " + pod.Status.Message
	}
	return state, nil, reason
}

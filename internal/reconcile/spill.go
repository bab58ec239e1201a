package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"crucible.dev/crucible/internal/dispatch"
	"crucible.dev/crucible/internal/metrics"
	"crucible.dev/crucible/internal/placement"
	"crucible.dev/crucible/internal/store"
	"crucible.dev/crucible/internal/workpod"
)

// Spill-over (R-PL3): a pod the controller placed (its row has a
// Placement), that never started and has waited "Unschedulable" for its
// class's spill_after, moves to another spoke, at most max_spills times.
// A pod its submitter pinned to a cluster never moves, nor does a pod that
// started. The move keeps one live pod per row at every moment:
//
//  1. the Placer decides where the pod goes, before anything is undone:
//     nowhere (no other spoke fits it now) and the pod stays and waits;
//  2. the pod is deleted by uid and confirmed gone (a spoke that cannot
//     confirm, unreachable or still stopping it, keeps it until it can);
//  3. the row moves (store.MoveWorkPod, fenced as this spoke's write, and
//     only if the row still names that pod): pending on the new spoke, no
//     pod — what a stopped controller's startup reconcile dispatches;
//  4. the pod is created on the new spoke and the row records it.
//
// Like max_pending, the wait is checked where it is recorded and the key
// queued again for the moment it passes; spill_after is shorter than
// max_pending (the profile's validation), so a pod moves before it fails.

// Placer places a spilled pod again: the API server, which places submits
// (api.Server.Replace).
type Placer interface {
	// Replace is row's move — From and PodUID the row's, To the chosen
	// spoke, the spec and placement as there — and the pod as that spoke
	// shapes it; a *placement.NoFitError when no other spoke can take it
	// now. Reason is the caller's to set.
	Replace(ctx context.Context, row store.WorkPod) (store.Move, workpod.Valid, error)
}

// spillRetry is how long a pod no other spoke could take waits before its
// move is decided again: capacity frees on the time scale of pods.
const spillRetry = 30 * time.Second

// decideSpill decides, at now, whether f's row has waited unschedulable
// past its class's spill_after and may move: placed, not pinned, its pod
// created and not started, fewer moves than max_spills. Only the live row
// of this cluster counts, and only while the pod in the cache (if any) is
// its own.
func decideSpill(f syncFacts, now time.Time) waitLimit {
	row := f.Row
	switch {
	case row == nil, row.Cluster != f.Cluster, row.Placement == nil:
		return waitLimit{}
	case row.State != store.StateDispatched, row.PodUID == "":
		return waitLimit{} // not created yet, or started: never moves
	case row.Waiting == nil, row.Waiting.Reason != corev1.PodReasonUnschedulable:
		return waitLimit{}
	case f.Pod != nil && row.PodUID != string(f.Pod.UID):
		return waitLimit{}
	}
	shape := storedShape(row.Spec)
	if len(row.Placement.Tried) >= shape.MaxSpills {
		return waitLimit{}
	}
	return limitWait(row, shape.SpillAfterSeconds, now, func(limit time.Duration) string {
		return fmt.Sprintf("unschedulable on %s for %s (class %s spill_after)", row.Cluster, limit, shape.Class)
	})
}

// enforceSpill acts on decideSpill's verdict for f. done reports that the
// pod moved (or moving it was tried): nothing else is decided for f in
// this sync.
func (r *Reconciler) enforceSpill(ctx context.Context, f syncFacts) (done bool, err error) {
	if r.Placer == nil {
		return false, nil
	}
	return r.enforceLimit(ctx, f, decideSpill(f, time.Now()), r.spill)
}

// spill moves f's pod (the steps of the comment above). An error requeues
// the key with backoff: every step is safe to take again.
func (r *Reconciler) spill(ctx context.Context, f syncFacts, reason string) error {
	row := *f.Row
	move, valid, err := r.Placer.Replace(ctx, row)
	if nofit, ok := errors.AsType[*placement.NoFitError](err); ok {
		metrics.Spills.WithLabelValues(row.Cluster, "stayed").Inc()
		r.logger().Info("a pod past its class's spill_after stays: no other cluster takes it now",
			"cluster", row.Cluster, "pod", row.ID, "decision", nofit.Error())
		r.enqueueAfter(key{Cluster: f.Cluster, Name: row.ID}, spillRetry)
		return nil
	}
	if err != nil {
		return fmt.Errorf("place %s again: %w", row.ID, err)
	}
	move.Reason = reason
	if err := r.confirmGone(ctx, row); err != nil {
		return err
	}
	moved, err := r.Store.MoveWorkPod(ctx, row.ID, move)
	if errors.Is(err, store.ErrConflict) {
		return nil // cancelled or finished meanwhile: its pod is gone, as it should be
	}
	if err != nil {
		return err
	}
	metrics.Spills.WithLabelValues(row.Cluster, "moved").Inc()
	r.logger().Info("moved a pod past its class's spill_after", "from", move.From, "to", move.To, "pod", row.ID, "reason", reason)
	// The row is the new spoke's now: this spoke's fence does not cover
	// it, and the dispatch is recorded as a submit's is, unfenced.
	return r.dispatchMoved(store.WithoutFence(ctx), moved, valid)
}

// confirmGone deletes row's pod by uid and confirms it gone: a pod still
// there (a kubelet stopping one that was bound after all, or a spoke that
// did not answer) is an error, and the row keeps it until a later sync
// confirms.
func (r *Reconciler) confirmGone(ctx context.Context, row store.WorkPod) error {
	uid := types.UID(row.PodUID)
	if _, err := r.deletePod(ctx, row.Cluster, row.Namespace, row.ID, uid); err != nil {
		return fmt.Errorf("delete spilled pod %s on %s: %w", row.ID, row.Cluster, err)
	}
	gone, err := r.Dispatcher.Gone(ctx, row.Cluster, row.Namespace, row.ID, uid)
	switch {
	case err != nil:
		return fmt.Errorf("confirm spilled pod %s gone from %s: %w", row.ID, row.Cluster, err)
	case !gone:
		return fmt.Errorf("spilled pod %s on %s: deleted, not gone yet", row.ID, row.Cluster)
	}
	return nil
}

// dispatchMoved creates a moved row's pod on its new spoke and records it,
// as a submit's dispatch does: a dispatch that fails fails the row with
// the spoke's word.
func (r *Reconciler) dispatchMoved(ctx context.Context, row store.WorkPod, valid workpod.Valid) error {
	res, derr := r.Dispatcher.Dispatch(ctx, row.Cluster, valid)
	if derr != nil {
		_, err := r.Store.TransitionWorkPod(ctx, row.ID, store.Transition{From: []store.State{store.StatePending}, To: store.StateFailed,
			Reason: "dispatch after a move: " + dispatch.PublicMessage(derr), Finish: true})
		if err != nil && !errors.Is(err, store.ErrConflict) {
			return err
		}
		return nil
	}
	_, err := r.Store.TransitionWorkPod(ctx, row.ID, store.Transition{From: []store.State{store.StatePending},
		To: store.StateDispatched, PodUID: string(res.PodUID)})
	if err != nil && !errors.Is(err, store.ErrConflict) { // conflict: the new spoke's watch recorded it first
		return fmt.Errorf("record the dispatch of %s: %w", row.ID, err)
	}
	metrics.PodTransitions.WithLabelValues(row.Cluster, string(store.StateDispatched)).Inc()
	return nil
}

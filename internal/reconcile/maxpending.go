package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"crucible.dev/crucible/internal/metrics"
	"crucible.dev/crucible/internal/store"
	"crucible.dev/crucible/internal/workpod"
)

// A pod class's max_pending gives up on a pod the scheduler does not place:
// one whose row has waited "Unschedulable" for that long without a break
// (the row's Waiting.Since, which a new wait reason resets) has its pod
// deleted and its row failed with the scheduler's last word. The limit is
// the one the pod was accepted under (its stored shape), not the profile's
// of today.
//
// The limit is checked where the wait is recorded, in the sync of the pod's
// key, and a pod still within it is queued again for the moment it passes:
// a pod that stays unschedulable has no further events to sync it. The
// queue's AddAfter fits that better than the sweep: it fires at the limit
// rather than up to a sweep interval (a minute) later, costs nothing for
// the pods of classes without a limit, and needs no list of the spoke; a
// restarted or new leader arms it again, as its startup reconcile syncs
// every live row that has a pod, and the wait's start is in the row.

// waitLimit is the verdict on an Unschedulable wait against a class's
// limit (max_pending, spill_after).
type waitLimit struct {
	// Passed: the limit has passed; the pod is failed (max_pending) or
	// moved (spill_after), for Reason.
	Passed bool
	Reason string
	// Recheck, when positive, is how long until the limit passes.
	Recheck time.Duration
}

// limitWait judges row's Unschedulable wait at now against seconds, the
// class's limit as the pod was accepted (0: none); why words the limit
// passed, the scheduler's last word is added to it.
func limitWait(row *store.WorkPod, seconds int64, now time.Time, why func(limit time.Duration) string) waitLimit {
	if seconds <= 0 {
		return waitLimit{}
	}
	limit := time.Duration(seconds) * time.Second
	if left := row.Waiting.Since.Add(limit).Sub(now); left > 0 {
		return waitLimit{Recheck: left}
	}
	return waitLimit{Passed: true, Reason: joinReason(why(limit), row.Waiting.Message)}
}

// decidePending decides, at now, whether the row of f has waited
// unschedulable past its class's max_pending. Only the live row of this
// cluster counts, and only while the pod in the cache (if any) is its own;
// a pod gone from the cache does not stop it: the row's wait is what the
// limit measures, and a delete of ours whose row write failed is finished
// on the next sync rather than taken for someone else's.
func decidePending(f syncFacts, now time.Time) waitLimit {
	row := f.Row
	switch {
	case row == nil, row.Cluster != f.Cluster, !row.State.Live():
		return waitLimit{}
	case row.Waiting == nil, row.Waiting.Reason != corev1.PodReasonUnschedulable:
		return waitLimit{}
	case f.Pod != nil && row.PodUID != "" && row.PodUID != string(f.Pod.UID):
		return waitLimit{} // another pod of that name; decideSync's rules
	}
	shape := storedShape(row.Spec)
	return limitWait(row, shape.MaxPendingSeconds, now, func(limit time.Duration) string {
		return fmt.Sprintf("unschedulable for %s (class %s max_pending)", limit, shape.Class)
	})
}

// storedShape is the shape in a row's stored spec (the API's submission,
// which embeds workpod.WorkPod). A spec that does not decode, or one from
// before shapes were kept, has the zero shape: no limit, which is what
// such a pod was accepted under.
func storedShape(spec []byte) workpod.Shape {
	var s struct {
		Shape workpod.Shape `json:"shape"`
	}
	if len(spec) == 0 || json.Unmarshal(spec, &s) != nil {
		return workpod.Shape{}
	}
	return s.Shape
}

// enforceMaxPending acts on decidePending's verdict for f. done reports
// that the row was failed (or failing it was tried): nothing else is
// decided for f in this sync.
func (r *Reconciler) enforceMaxPending(ctx context.Context, f syncFacts) (done bool, err error) {
	return r.enforceLimit(ctx, f, decidePending(f, time.Now()), r.failUnschedulable)
}

// enforceLimit acts on a wait limit's verdict for f: act once it passed
// (done), else f's key queued again for the moment it will.
func (r *Reconciler) enforceLimit(ctx context.Context, f syncFacts, a waitLimit, act func(context.Context, syncFacts, string) error) (done bool, err error) {
	switch {
	case a.Passed:
		return true, act(ctx, f, a.Reason)
	case a.Recheck > 0:
		r.enqueueAfter(key{Cluster: f.Cluster, Name: f.Row.ID}, a.Recheck)
	}
	return false, nil
}

// failUnschedulable deletes the pod of f's row, then fails the row for
// reason: failed, not cancelled, as nobody asked. The pod goes first: a
// delete that fails leaves the row live and waiting, so the requeued sync
// decides the same and tries again; the row first would leave a pending
// pod behind that nothing removes (a failed row's pod is kept for its
// log). The watch's "deleted before it finished" cannot overtake the row
// write: the queue never syncs a key while it is syncing it, so the
// delete's event is synced after the row is failed. A delete is bounded
// as the sweep's are.
func (r *Reconciler) failUnschedulable(ctx context.Context, f syncFacts, reason string) error {
	row := f.Row
	uid := types.UID(row.PodUID)
	if f.Pod != nil {
		uid = f.Pod.UID
	}
	if _, err := r.deletePod(ctx, row.Cluster, row.Namespace, row.ID, uid); err != nil {
		return fmt.Errorf("delete unschedulable pod %s on %s: %w", row.ID, row.Cluster, err)
	}
	_, err := r.Store.TransitionWorkPod(ctx, row.ID, store.Transition{From: store.LiveStates, To: store.StateFailed, Reason: reason, Finish: true})
	if errors.Is(err, store.ErrConflict) {
		return nil // finished (cancelled) meanwhile: it keeps that verdict
	}
	if err != nil {
		return err
	}
	r.uploads().Forget(row.ID)
	metrics.PodTransitions.WithLabelValues(row.Cluster, string(store.StateFailed)).Inc()
	r.logger().Info("failed a pod unschedulable past its class's max_pending", "cluster", row.Cluster, "pod", row.ID, "reason", reason)
	return nil
}

// enqueueAfter queues k on its cluster's queue once d has passed. A
// reconciler that was not started has no queues, and nothing to sync k.
func (r *Reconciler) enqueueAfter(k key, d time.Duration) {
	r.mu.RLock()
	q := r.queues[k.Cluster]
	r.mu.RUnlock()
	if q != nil {
		q.AddAfter(k, d)
	}
}

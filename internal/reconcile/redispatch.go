package reconcile

import (
	"context"
	"errors"
	"fmt"

	"crucible.dev/crucible/internal/dispatch"
	"crucible.dev/crucible/internal/metrics"
	"crucible.dev/crucible/internal/store"
	"crucible.dev/crucible/internal/workpod"
)

// Reasons of a row that a submit persisted and the controller stopped
// before dispatching, whose pod the startup reconcile confirmed absent.
const (
	reasonAwaitingReplay = "not dispatched: the controller stopped before its dispatch, and its secret files are not stored; " +
		"a replay of the submit with its Idempotency-Key dispatches it"
	reasonCannotRedispatch = "not dispatched: the controller stopped before its dispatch, and its secret files are not stored, " +
		"so it cannot be dispatched again; submit it again"
)

// neverDispatched reports whether row is one a submit persisted but never
// dispatched: pending, with no pod uid. Such a row's pod never existed as
// far as the store knows, so "lost" would be the wrong story; every other
// live row without a pod had one that vanished.
func neverDispatched(row store.WorkPod) bool {
	return row.State == store.StatePending && row.PodUID == ""
}

// redispatch dispatches a never-dispatched row from its stored spec, once
// a list confirmed its pod absent and its submit's own dispatch is over
// (PendingGrace). Names are deterministic, so a dispatch that races another
// (a replay of the submit) adopts the pod instead of making a second one.
// A row with secret files cannot be dispatched from the store, which keeps
// only their digests: with an Idempotency-Key it stays pending, saying so,
// for a replay (which carries the values) to dispatch; without one it fails.
func (r *Reconciler) redispatch(ctx context.Context, cluster string, row store.WorkPod) error {
	full, err := r.Store.GetWorkPod(ctx, row.ID)
	if err != nil {
		return err
	}
	if !neverDispatched(full) {
		return nil // a replay or a cancel got to it first
	}
	wp, secrets, err := workpod.DecodeStored(full.Spec)
	if err != nil {
		return r.failRedispatch(ctx, cluster, full.ID, "not dispatched: its stored spec cannot be read: "+err.Error())
	}
	if len(secrets) > 0 {
		if full.IdempotencyKey == "" {
			return r.failRedispatch(ctx, cluster, full.ID, reasonCannotRedispatch)
		}
		if full.Reason != reasonAwaitingReplay {
			_, err := r.Store.TransitionWorkPod(ctx, full.ID, store.Transition{From: []store.State{store.StatePending}, Reason: reasonAwaitingReplay})
			if err != nil && !errors.Is(err, store.ErrConflict) {
				return err
			}
		}
		metrics.Redispatches.WithLabelValues(cluster, "awaiting_replay").Inc()
		r.Log.Info("startup reconcile: a row with secret files awaits a replay of its submit", "cluster", cluster, "pod", full.ID)
		return nil
	}
	valid, errs := workpod.Check(wp)
	if len(errs) > 0 {
		return r.failRedispatch(ctx, cluster, full.ID, "not dispatched: its stored spec is not valid: "+errs.ToAggregate().Error())
	}
	res, derr := r.Dispatcher.Dispatch(ctx, cluster, valid)
	if derr != nil {
		r.Log.Error("startup reconcile: dispatch of a row its submit never dispatched", "cluster", cluster, "pod", full.ID, "error", derr)
		return r.failRedispatch(ctx, cluster, full.ID, "dispatch: "+dispatch.PublicMessage(derr))
	}
	_, err = r.Store.TransitionWorkPod(ctx, full.ID, store.Transition{From: []store.State{store.StatePending},
		To: store.StateDispatched, PodUID: string(res.PodUID)})
	if err != nil && !errors.Is(err, store.ErrConflict) { // conflict: a replay recorded it first
		return fmt.Errorf("record the dispatch of %s: %w", full.ID, err)
	}
	metrics.Redispatches.WithLabelValues(cluster, "dispatched").Inc()
	metrics.PodTransitions.WithLabelValues(cluster, string(store.StateDispatched)).Inc()
	r.Log.Info("startup reconcile: dispatched a row its submit never dispatched", "cluster", cluster, "pod", full.ID, "adopted", res.Adopted)
	return nil
}

// failRedispatch fails a never-dispatched row that cannot be dispatched.
func (r *Reconciler) failRedispatch(ctx context.Context, cluster, id, reason string) error {
	_, err := r.Store.TransitionWorkPod(ctx, id, store.Transition{From: []store.State{store.StatePending}, To: store.StateFailed,
		Reason: reason, Finish: true})
	if errors.Is(err, store.ErrConflict) {
		return nil
	}
	if err != nil {
		return err
	}
	metrics.Redispatches.WithLabelValues(cluster, "failed").Inc()
	metrics.PodTransitions.WithLabelValues(cluster, string(store.StateFailed)).Inc()
	return nil
}

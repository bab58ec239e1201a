package reconcile

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"crucible.dev/crucible/internal/store"
	"crucible.dev/crucible/internal/workpod"
)

// The reconciler reads, then decides, then acts (kueue multikueue's
// readGroup/reconcileGroup): sync and the sweep gather what they know into a
// facts value, a pure function below turns it into an action, and only then
// is anything written or deleted. The decisions are table-tested without a
// store or a cluster (decide_test.go).

// syncOp is what sync does for one pod key.
type syncOp int

const (
	// syncLeave changes nothing.
	syncLeave syncOp = iota
	// syncAdvance moves the live row forward to syncAction.State and records
	// the pod's uid (transition).
	syncAdvance
	// syncFinish collects the finished pod's log, then records its outcome.
	syncFinish
	// syncLose marks the row lost for syncAction.Reason.
	syncLose
)

func (o syncOp) String() string {
	switch o {
	case syncAdvance:
		return "advance"
	case syncFinish:
		return "finish"
	case syncLose:
		return "lose"
	}
	return "leave"
}

// syncAction is decideSync's verdict.
type syncAction struct {
	Op     syncOp
	State  store.State // syncAdvance: the live state the pod's phase shows
	Reason string      // syncLose
}

// syncFacts is what sync read for one key.
type syncFacts struct {
	// Cluster is the cluster whose informer queued the key.
	Cluster string
	// Row is the work pod's row; nil when the store has none.
	Row *store.WorkPod
	// Pod is the pod in the cluster's informer cache; nil when it is not
	// there (deleted, or never created).
	Pod *cachedPod
}

// decideSync decides what one queued pod event means for its row.
func decideSync(f syncFacts) syncAction {
	row, pod := f.Row, f.Pod
	switch {
	case row == nil:
		return syncAction{} // no row: an orphan, the sweep's business
	case row.Cluster != f.Cluster:
		return syncAction{} // a same-named pod on another cluster is not this row's
	case pod == nil:
		if row.State.Live() && row.PodUID != "" {
			// Deleted on the spoke before it finished; the informer saw it go.
			return syncAction{Op: syncLose, Reason: "pod deleted on " + row.Cluster + " before it finished"}
		}
		return syncAction{} // not created yet, or finished and swept
	case row.PodUID != "" && row.PodUID != string(pod.UID):
		return syncAction{} // an older or foreign pod of that name; the sweep decides
	}
	switch pod.Phase {
	case corev1.PodSucceeded, corev1.PodFailed:
		if row.State.Terminal() && (row.LogCollected || row.State == store.StateCancelled) {
			return syncAction{} // recorded already; a cancelled pod's log is not collected
		}
		return syncAction{Op: syncFinish}
	case corev1.PodRunning:
		return advanceTo(row, pod, store.StateRunning)
	default:
		return advanceTo(row, pod, store.StateDispatched)
	}
}

// observation is what the pod shows that its row has not recorded: start
// moments beyond the row's progress, a node, a wait that differs from the
// row's. ok is false when the row has it all — the common case for a pod's
// many status updates: no store write — and for a pod that is not the
// live row's (decideSync's rules).
func observation(f syncFacts) (o store.Observation, ok bool) {
	row, pod := f.Row, f.Pod
	if row == nil || pod == nil || row.Cluster != f.Cluster || !row.State.Live() || (row.PodUID != "" && row.PodUID != string(pod.UID)) {
		return o, false
	}
	o = store.Observation{Node: pod.Node, Moments: pod.moments()}
	if w := pod.Waiting; w != nil {
		o.Waiting = &store.Waiting{Reason: w.Reason, Message: w.Message}
	}
	probe := *row
	_, ok = o.Apply(&probe, time.Time{})
	return o, ok
}

// moments are the start moments the pod shows: bound to a node, its image
// pulled, its container started (running, or terminated after running).
func (p *cachedPod) moments() []store.Event {
	var m []store.Event
	if p.Node != "" {
		m = append(m, store.EventScheduled)
	}
	if p.Pulled {
		m = append(m, store.EventPulled)
	}
	if p.Phase == corev1.PodRunning || p.Terminated != nil {
		m = append(m, store.EventStarted)
	}
	return m
}

// advanceTo moves the row up to `to` — unless the row as read needs no
// change, the common case for a pod's many status updates: no store write.
// The write re-checks against the row as it is then (advance).
func advanceTo(row *store.WorkPod, pod *cachedPod, to store.State) syncAction {
	probe := *row
	if !advance(&probe, pod.UID, to) {
		return syncAction{}
	}
	return syncAction{Op: syncAdvance, State: to}
}

// liveRank orders the live states; a row only ever moves up it.
var liveRank = map[store.State]int{store.StatePending: 0, store.StateDispatched: 1, store.StateRunning: 2}

// advance applies a transition to the row as it is in the store now (it may
// have moved since sync read it): a live row moves up to `to`, never back,
// and takes the pod's uid. false means the row needs no change.
func advance(p *store.WorkPod, uid types.UID, to store.State) bool {
	cur, live := liveRank[p.State]
	if !live || (cur >= liveRank[to] && p.PodUID != "") {
		return false
	}
	p.PodUID = string(uid)
	if liveRank[to] > cur {
		p.State = to
	}
	return true
}

// recordOutcome applies a finished pod's collected log and outcome to the
// row as it is in the store now: the log is collected whatever the row says,
// but a row cancelled or lost meanwhile keeps that verdict.
func recordOutcome(p *store.WorkPod, uid types.UID, state store.State, exit *int32, reason string, now time.Time) {
	p.LogCollected = true
	p.PodUID = string(uid)
	if p.State.Terminal() {
		return
	}
	p.State, p.ExitCode, p.Reason, p.FinishedAt = state, exit, reason, &now
}

// lose is the transition that marks a live row lost for reason; a row that
// finished meanwhile keeps its verdict (the store answers ErrConflict).
func lose(reason string) store.Transition {
	return store.Transition{From: store.LiveStates, To: store.StateLost, Reason: reason, Finish: true}
}

// sweepVerdict is why the sweep deletes a pod, or sweepKeep. The values are
// the reason label of crucible_sweep_deletions_total.
type sweepVerdict string

const (
	sweepKeep      sweepVerdict = ""
	sweepCollected sweepVerdict = "collected"
	sweepOrphaned  sweepVerdict = "orphaned"
)

// sweepFacts is what the sweep read about one pod of a fresh list.
type sweepFacts struct {
	// Cluster is the cluster that was listed.
	Cluster string
	// Pod is the listed pod's metadata: the sweep lists no more.
	Pod *metav1.ObjectMeta
	// Row is the row named like the pod; nil when the store has none.
	Row *store.WorkPod
	// RowUnknown is true when the store could not answer (or was not asked,
	// for a pod that is not sweepable): the sweep never deletes on a guess.
	RowUnknown bool
}

// sweepable reports whether the sweep may consider pod at all: it is
// instance's (never touch what is not ours, whatever the selector returned)
// and not going already. The sweep reads a row only for such a pod.
func sweepable(pod *metav1.ObjectMeta, instance string) bool {
	return pod.Labels[workpod.LabelManagedBy] == workpod.ManagedByValue && pod.Labels[workpod.LabelInstance] == instance &&
		pod.DeletionTimestamp == nil
}

// decideSweep says whether the sweep deletes one listed pod of instance:
// finished and collected, or orphaned (no live row of its own) for longer
// than grace at now.
func decideSweep(f sweepFacts, instance string, grace time.Duration, now time.Time) sweepVerdict {
	pod, row := f.Pod, f.Row
	if !sweepable(pod, instance) || f.RowUnknown {
		return sweepKeep // not ours, going already, or the store unsure: keep
	}
	orphaned := sweepKeep
	if now.Sub(pod.CreationTimestamp.Time) > grace {
		orphaned = sweepOrphaned
	}
	switch {
	case row == nil, row.Cluster != f.Cluster, row.PodUID != "" && types.UID(row.PodUID) != pod.UID:
		return orphaned // not this pod's row
	case row.State.Live():
		return sweepKeep // awaited
	case row.LogCollected:
		return sweepCollected
	case row.State == store.StateCancelled, row.State == store.StateLost:
		return orphaned
	}
	return sweepKeep // finished, its log not collected yet
}

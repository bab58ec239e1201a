package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// EventMoved is a spill-over in a pod's history: Reason says why the pod
// left, Message "wharf → dock".
const EventMoved Event = "moved"

// Move is a spill-over (R-PL3): a placed row whose pod never started
// leaves its cluster for another. The row stays one row, so the pod keeps
// its id, its history and its submitter's idempotency key.
type Move struct {
	// From and PodUID are the row's cluster and pod uid as the mover saw
	// them ("" for a pod never created); the caller has confirmed that pod
	// gone. A row that no longer says so is not moved (ErrConflict).
	From   string
	PodUID string
	// To is the cluster the row moves to, Namespace its namespace there,
	// Spec the work pod as To shapes it (opaque), Placement the move's
	// decision (its Tried lists From).
	To        string
	Namespace string
	Spec      []byte
	Placement *Placement
	// Reason is why the pod left From, for the history.
	Reason string
}

// moveArrow joins a move entry's clusters: "wharf → dock".
const moveArrow = " → "

// Move reads a move entry (EventMoved): the clusters it left and went to.
func (e HistoryEntry) Move() (from, to string, ok bool) {
	if e.Event != EventMoved {
		return "", "", false
	}
	return strings.Cut(e.Message, moveArrow)
}

func (m Move) validate() error {
	switch {
	case m.From == "" || m.To == "":
		return errors.New("move: empty cluster")
	case m.From == m.To:
		return fmt.Errorf("move: from and to are both %s", m.From)
	case m.Namespace == "":
		return errors.New("move: empty namespace")
	case len(m.Spec) == 0:
		return errors.New("move: empty spec")
	case m.Placement == nil:
		return errors.New("move: no placement")
	case m.Reason == "":
		return errors.New("move: no reason")
	}
	return nil
}

// movable are the states a row moves from: its pod was never created, or
// never started (a running pod never moves).
var movable = []State{StatePending, StateDispatched}

func (s *sqlStore) MoveWorkPod(ctx context.Context, id string, m Move) (WorkPod, error) {
	p, err := s.moveWorkPod(ctx, id, m)
	if err != nil {
		return WorkPod{}, fmt.Errorf("move work pod %s from %s to %s: %w", id, m.From, m.To, err)
	}
	return p, nil
}

// moveSQL makes the row pending on its new cluster with no pod: a
// pending row without a pod uid is one the startup reconcile dispatches,
// so a mover that stops between the move and the dispatch loses nothing.
const moveSQL = `UPDATE work_pods SET cluster = ?, namespace = ?, state = ?, pod_uid = '', spec = ?, placement = ?, reason = '',
	node = '', progress = '', waiting_reason = '', waiting_message = '', waiting_since = NULL, updated_at = ? WHERE id = ?`

// moveWorkPod reads the row holding it (BEGIN IMMEDIATE on SQLite, FOR
// UPDATE on PostgreSQL), checks it is still where the mover saw it, and
// moves it with its history entry in the same transaction. A fenced move
// is From's owner's: the fence is the cluster the row leaves.
func (s *sqlStore) moveWorkPod(ctx context.Context, id string, m Move) (WorkPod, error) {
	if err := m.validate(); err != nil {
		return WorkPod{}, err
	}
	placement, err := encodePlacement(m.Placement)
	if err != nil {
		return WorkPod{}, err
	}
	q := `SELECT ` + podColumnsWithoutSpec + ` FROM work_pods WHERE id = ?`
	if s.d == dialectPostgres {
		q += ` FOR UPDATE`
	}
	sts, err := s.prepareWrite(ctx, s.d.rebind(q), s.d.rebind(moveSQL), s.d.rebind(lastSeqSQL), s.d.rebind(historySQL))
	if err != nil {
		return WorkPod{}, err
	}
	tx, f, err := s.beginWrite(ctx)
	if err != nil {
		return WorkPod{}, err
	}
	defer func() { _ = tx.Rollback() }() // no-op after Commit

	p, err := scanWorkPod(tx.StmtContext(ctx, sts[0]).QueryRowContext(ctx, id))
	if errors.Is(err, sql.ErrNoRows) {
		return WorkPod{}, ErrNotFound
	}
	if err != nil {
		return WorkPod{}, err
	}
	if err := f.owns(id, p.Cluster); err != nil {
		return WorkPod{}, err
	}
	switch {
	case p.Cluster != m.From:
		return WorkPod{}, fmt.Errorf("%w: the row is on %s now", ErrConflict, p.Cluster)
	case p.PodUID != m.PodUID:
		return WorkPod{}, fmt.Errorf("%w: the row's pod is %q now, not %q", ErrConflict, p.PodUID, m.PodUID)
	case !slices.Contains(movable, p.State):
		return WorkPod{}, fmt.Errorf("%w: state is %s, not one of %v", ErrConflict, p.State, movable)
	case p.Placement == nil:
		return WorkPod{}, fmt.Errorf("%w: the submitter named its cluster; it never moves", ErrConflict)
	}
	now := s.clock.now()
	if _, err := tx.StmtContext(ctx, sts[1]).ExecContext(ctx, m.To, m.Namespace, string(StatePending), m.Spec, placement, now, id); err != nil {
		return WorkPod{}, err
	}
	moved := HistoryEntry{At: fromNanos(now), Event: EventMoved, State: StatePending, Reason: m.Reason, Message: m.From + moveArrow + m.To}
	if err := appendHistory(ctx, tx, sts[2], sts[3], id, []HistoryEntry{moved}); err != nil {
		return WorkPod{}, err
	}
	if err := tx.Commit(); err != nil {
		return WorkPod{}, err
	}
	p.Cluster, p.Namespace, p.State, p.PodUID, p.Spec, p.Placement, p.Reason = m.To, m.Namespace, StatePending, "", m.Spec, m.Placement, ""
	p.Node, p.Progress, p.Waiting, p.UpdatedAt = "", "", nil, fromNanos(now)
	return p, nil
}

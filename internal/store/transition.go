package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Transition is a state change decided by the row's state alone: "if the
// row is pending, make it dispatched with this pod uid". TransitionWorkPod
// applies it as one conditional UPDATE (compare-and-set on the state)
// instead of UpdateWorkPod's read-modify-write transaction, so the common
// updates of a pod's life cost one statement and one round trip.
// Zero fields leave their column as it is; a terminal To also clears
// Waiting (a finished pod waits for nothing).
type Transition struct {
	// From lists the states the row must be in; empty means any state.
	From []State
	// To is the new state; "" keeps the row's.
	To State
	// PodUID, Reason and ExitCode are set when non-empty / non-nil.
	PodUID   string
	Reason   string
	ExitCode *int32
	// Finish sets FinishedAt to the store's clock (the UpdatedAt written).
	Finish bool
	// LogCollected sets LogCollected to true.
	LogCollected bool
}

// Apply applies t to a row as TransitionWorkPod does in the database, with
// now as the store's clock: ErrConflict when the row's state is not one of
// From. It is the contract in one place, for stores kept in memory (the
// API's unit tests).
func (t Transition) Apply(p *WorkPod, now time.Time) error {
	if err := t.validate(); err != nil {
		return err
	}
	if len(t.From) > 0 && !slices.Contains(t.From, p.State) {
		return fmt.Errorf("%w: state is %s, not one of %v", ErrConflict, p.State, t.From)
	}
	if t.To != "" {
		p.State = t.To
	}
	if t.PodUID != "" {
		p.PodUID = t.PodUID
	}
	if t.Reason != "" {
		p.Reason = t.Reason
	}
	if t.ExitCode != nil {
		p.ExitCode = t.ExitCode
	}
	if t.Finish {
		p.FinishedAt = &now
	}
	if t.LogCollected {
		p.LogCollected = true
	}
	if t.To.Terminal() {
		p.Waiting = nil
	}
	p.UpdatedAt = now
	return nil
}

var allStates = []State{StatePending, StateDispatched, StateRunning, StateSucceeded, StateFailed, StateCancelled, StateLost}

// validate refuses what would write an undeclared state, and From lists
// longer than there are states (each length is a statement of its own).
func (t Transition) validate() error {
	if len(t.From) > len(allStates) {
		return fmt.Errorf("%d from states, there are %d", len(t.From), len(allStates))
	}
	if t.To != "" && !t.To.valid() {
		return fmt.Errorf("unknown state %q", t.To)
	}
	for _, s := range t.From {
		if !s.valid() {
			return fmt.Errorf("unknown from state %q", s)
		}
	}
	return nil
}

func (s *sqlStore) TransitionWorkPod(ctx context.Context, id string, t Transition) (WorkPod, error) {
	p, err := s.transitionWorkPod(ctx, id, t)
	if err != nil {
		return WorkPod{}, fmt.Errorf("transition work pod %s: %w", id, err)
	}
	return p, nil
}

// transitionWorkPod runs UPDATE … WHERE id = ? AND state IN (…) RETURNING
// the row (without its spec: a transition never changes it, and it may be
// MiBs). A row that did not match is looked up once more only to tell
// ErrNotFound from ErrConflict; that path is the rare one.
func (s *sqlStore) transitionWorkPod(ctx context.Context, id string, t Transition) (WorkPod, error) {
	if err := t.validate(); err != nil {
		return WorkPod{}, err
	}
	now := s.clock.now()
	args := make([]any, 0, 8+len(t.From))
	args = append(args, now)
	if t.To != "" {
		args = append(args, string(t.To))
	}
	if t.PodUID != "" {
		args = append(args, t.PodUID)
	}
	if t.Reason != "" {
		args = append(args, t.Reason)
	}
	if t.ExitCode != nil {
		args = append(args, int64(*t.ExitCode))
	}
	if t.Finish {
		args = append(args, now)
	}
	if t.LogCollected {
		args = append(args, true)
	}
	args = append(args, id)
	for _, st := range t.From {
		args = append(args, string(st))
	}
	if f, fenced := FenceFrom(ctx); fenced {
		return s.transitionFenced(ctx, id, t, args, f)
	}
	p, err := scanWorkPod(s.queryRow(ctx, s.w, s.transitionSQL(t, false), args...))
	if errors.Is(err, sql.ErrNoRows) {
		return WorkPod{}, s.transitionMiss(ctx, nil, id, t.From)
	}
	return p, err
}

// transitionFenced runs the statement with the fence's condition: the row
// is the fence's cluster's and the cluster's epoch is the fence's, read
// (FOR SHARE on PostgreSQL) in the statement, so a fenced transition
// costs one statement too (epochSQL says why that holds). A row that did
// not match is looked at once more: when the cluster's epoch is lower the
// epoch is raised and the statement run again; when it is the fence's the
// statement is run again anyway, since it may have been raised between
// the statement and the look (by another writer of the same owner); then
// transitionMiss says why.
func (s *sqlStore) transitionFenced(ctx context.Context, id string, t Transition, args []any, f Fence) (WorkPod, error) {
	if err := f.validate(); err != nil {
		return WorkPod{}, err
	}
	args = append(args, f.Cluster, f.Epoch)
	q := s.transitionSQL(t, true)
	for again := false; ; again = true {
		p, err := scanWorkPod(s.queryRow(ctx, s.w, q, args...))
		if !errors.Is(err, sql.ErrNoRows) {
			return p, err
		}
		held, err := scanEpoch(s.w.QueryRowContext(ctx, s.d.rebind(epochSQL), f.Cluster), f.Cluster)
		switch {
		case err != nil:
			return WorkPod{}, err
		case held > f.Epoch:
			return WorkPod{}, fencedOff(f, held)
		case again && held == f.Epoch:
			return WorkPod{}, s.transitionMiss(ctx, &f, id, t.From)
		case again: // epochs never fall, nor are their rows deleted
			return WorkPod{}, fmt.Errorf("cluster %s: epoch %d claimed, then read back as %d", f.Cluster, f.Epoch, held)
		case held < f.Epoch:
			if err := s.raise(ctx, f); err != nil {
				return WorkPod{}, err
			}
		}
	}
}

// transitionMiss says why no row matched: none with that id, it is not
// f's cluster's (when fenced), or its state is not one of from.
func (s *sqlStore) transitionMiss(ctx context.Context, f *Fence, id string, from []State) error {
	var state, cluster string
	err := s.queryRow(ctx, s.w, s.d.rebind(`SELECT state, cluster FROM work_pods WHERE id = ?`), id).Scan(&state, &cluster)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return ErrNotFound
	case err != nil:
		return err
	}
	if err := f.owns(id, cluster); err != nil {
		return err
	}
	return fmt.Errorf("%w: state is %s, not one of %v", ErrConflict, state, from)
}

// transitionShape is what the statement of a transition depends on: which
// columns it sets and how many states it accepts.
type transitionShape struct {
	to, uid, reason, exit, finish, logged, terminal, fenced bool
	from                                                    int
}

// transitionSQL returns t's statement, built once per shape and dialect: a
// transition is on every pod's hot path, its few shapes repeat.
func (s *sqlStore) transitionSQL(t Transition, fenced bool) string {
	shape := transitionShape{t.To != "", t.PodUID != "", t.Reason != "", t.ExitCode != nil, t.Finish, t.LogCollected, t.To.Terminal(), fenced, len(t.From)}
	if q, ok := s.transitions.Load(shape); ok {
		return q.(string)
	}
	var q strings.Builder
	q.WriteString(`UPDATE work_pods SET updated_at = ?`)
	for _, c := range []struct {
		on  bool
		col string
	}{{shape.to, "state"}, {shape.uid, "pod_uid"}, {shape.reason, "reason"}, {shape.exit, "exit_code"}, {shape.finish, "finished_at"}, {shape.logged, "log_collected"}} {
		if c.on {
			q.WriteString(`, ` + c.col + ` = ?`)
		}
	}
	if shape.terminal {
		q.WriteString(`, waiting_reason = '', waiting_message = '', waiting_since = NULL`)
	}
	q.WriteString(` WHERE id = ?`)
	if shape.from > 0 {
		q.WriteString(` AND state IN (?` + strings.Repeat(`, ?`, shape.from-1) + `)`)
	}
	if shape.fenced {
		// Correlated with the row, so that PostgreSQL's generic plan still
		// finds the row by id: with "cluster = ?" beside the id it took
		// the (cluster, state) index and filtered a cluster's pending rows.
		q.WriteString(` AND EXISTS (SELECT 1 FROM spoke_epochs WHERE spoke_epochs.cluster = work_pods.cluster AND spoke_epochs.cluster = ? AND epoch = ?`)
		if s.d == dialectPostgres {
			q.WriteString(` FOR SHARE`)
		}
		q.WriteString(`)`)
	}
	q.WriteString(` RETURNING ` + podColumnsWithoutSpec)
	stmt := s.d.rebind(q.String())
	s.transitions.Store(shape, stmt)
	return stmt
}

package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Event is what a history entry records.
type Event string

// The events of a pod's history. EventState entries are the store's own,
// one for every state change (and the row's creation); the others come
// from ObservePod. The start moments are ordered: a pod reaches them in the
// order of Moments, and each is recorded at most once.
const (
	EventState     Event = "state"     // the row's state became State, for Reason
	EventWaiting   Event = "waiting"   // the pod waits: Reason and Message as its spoke said
	EventScheduled Event = "scheduled" // bound to a node, named by Message
	EventPulled    Event = "pulled"    // the spoke pulled the work container's image
	EventStarted   Event = "started"   // the work container started
)

// Moments are the start moments in the order a pod reaches them.
var Moments = []Event{EventScheduled, EventPulled, EventStarted}

// MaxHistory bounds a pod's history: its first entry and the latest
// MaxHistory-1 are kept (the triggers of migration 0006 hold the figure).
const MaxHistory = 100

// HistoryEntry is one moment of a pod's life. State is the row's state
// then; times are UTC and the store's clock.
type HistoryEntry struct {
	At      time.Time
	Event   Event
	State   State
	Reason  string
	Message string
}

// Waiting is why a live pod is not running, as its spoke said: the
// scheduler's PodScheduled=False, or a container's waiting state. Since is
// when the store first saw the reason.
type Waiting struct {
	Reason, Message string
	Since           time.Time
}

// Observation is what a live pod's spoke says of it that is no state.
type Observation struct {
	// Node is the node the pod is bound to, "" while it is not.
	Node string
	// Moments are the start moments the pod shows, in Moments order (one
	// may be missing: a runtime that reports no image id never shows
	// EventPulled).
	Moments []Event
	// Waiting is why the pod waits, nil when nothing holds it. Its Since
	// is the store's to set.
	Waiting *Waiting
}

// Apply applies o to a row as ObservePod does, with now as the store's
// clock, and returns the history entries it makes: one per start moment
// beyond the row's Progress, and one when the waiting reason changes (the
// same reason again records nothing; a new message of it updates the row
// only). A wait that ended is cleared without an entry: the moment that
// ended it tells. A terminal row takes nothing. changed reports whether p
// changed at all; it is the contract in one place, for the reconciler's
// "is there anything to write" and stores kept in memory.
func (o Observation) Apply(p *WorkPod, now time.Time) (entries []HistoryEntry, changed bool) {
	if p.State.Terminal() {
		return nil, false
	}
	reached := slices.Index(Moments, p.Progress)
	for _, m := range o.Moments {
		i := slices.Index(Moments, m)
		if i <= reached {
			continue
		}
		reached, p.Progress, changed = i, m, true
		e := HistoryEntry{At: now, Event: m, State: p.State}
		if m == EventScheduled {
			e.Message = o.Node
		}
		entries = append(entries, e)
	}
	if o.Node != "" && p.Node != o.Node {
		p.Node, changed = o.Node, true
	}
	switch w := o.Waiting; {
	case w == nil:
		if p.Waiting != nil {
			p.Waiting, changed = nil, true
		}
	case p.Waiting == nil || p.Waiting.Reason != w.Reason:
		p.Waiting, changed = &Waiting{Reason: w.Reason, Message: w.Message, Since: now}, true
		entries = append(entries, HistoryEntry{At: now, Event: EventWaiting, State: p.State, Reason: w.Reason, Message: w.Message})
	case p.Waiting.Message != w.Message:
		p.Waiting, changed = &Waiting{Reason: w.Reason, Message: w.Message, Since: p.Waiting.Since}, true
	}
	return entries, changed
}

// validate refuses what the schema would: an unknown moment, moments out
// of order, a wait without a reason.
func (o Observation) validate() error {
	last := -1
	for _, m := range o.Moments {
		i := slices.Index(Moments, m)
		switch {
		case i < 0:
			return fmt.Errorf("unknown moment %q", m)
		case i <= last:
			return fmt.Errorf("moments %v out of order", o.Moments)
		}
		last = i
	}
	if o.Waiting != nil && o.Waiting.Reason == "" {
		return errors.New("waiting without a reason")
	}
	return nil
}

func (s *sqlStore) ObservePod(ctx context.Context, id string, o Observation) (WorkPod, bool, error) {
	p, changed, err := s.observePod(ctx, id, o)
	if err != nil {
		return WorkPod{}, false, fmt.Errorf("observe work pod %s: %w", id, err)
	}
	return p, changed, nil
}

// observePod reads the row holding it (BEGIN IMMEDIATE on SQLite, FOR
// UPDATE on PostgreSQL), so its entries' seq cannot race a state change's.
func (s *sqlStore) observePod(ctx context.Context, id string, o Observation) (WorkPod, bool, error) {
	if err := o.validate(); err != nil {
		return WorkPod{}, false, err
	}
	q := `SELECT ` + podColumnsWithoutSpec + ` FROM work_pods WHERE id = ?`
	if s.d == dialectPostgres {
		q += ` FOR UPDATE`
	}
	sts, err := s.prepareWrite(ctx, s.d.rebind(q), s.d.rebind(observeSQL), s.d.rebind(lastSeqSQL), s.d.rebind(historySQL))
	if err != nil {
		return WorkPod{}, false, err
	}
	tx, f, err := s.beginWrite(ctx)
	if err != nil {
		return WorkPod{}, false, err
	}
	defer func() { _ = tx.Rollback() }() // no-op after Commit

	p, err := scanWorkPod(tx.StmtContext(ctx, sts[0]).QueryRowContext(ctx, id))
	if errors.Is(err, sql.ErrNoRows) {
		return WorkPod{}, false, ErrNotFound
	}
	if err != nil {
		return WorkPod{}, false, err
	}
	if err := f.owns(id, p.Cluster); err != nil {
		return WorkPod{}, false, err
	}
	now := s.clock.now()
	entries, changed := o.Apply(&p, fromNanos(now))
	if !changed {
		return p, false, nil
	}
	reason, message, since := waitingArgs(p.Waiting)
	if _, err := tx.StmtContext(ctx, sts[1]).ExecContext(ctx, p.Node, string(p.Progress), reason, message, since, now, id); err != nil {
		return WorkPod{}, false, err
	}
	if err := appendHistory(ctx, tx, sts[2], sts[3], id, entries); err != nil {
		return WorkPod{}, false, err
	}
	if err := tx.Commit(); err != nil {
		return WorkPod{}, false, err
	}
	p.UpdatedAt = fromNanos(now)
	return p, true, nil
}

// The statements of an observation: the row's observed columns, and the
// history it appends.
const (
	observeSQL = `UPDATE work_pods SET node = ?, progress = ?,
		waiting_reason = ?, waiting_message = ?, waiting_since = ?, updated_at = ? WHERE id = ?`
	lastSeqSQL = `SELECT COALESCE(MAX(seq), 0) FROM pod_history WHERE pod_id = ?`
	historySQL = `INSERT INTO pod_history (pod_id, seq, occurred_at, event, state, reason, message) VALUES (?, ?, ?, ?, ?, ?, ?)`
)

// appendHistory adds entries after the pod's last one, inside the
// transaction that holds its row, through lastSeq and insert (lastSeqSQL
// and historySQL prepared on the write pool); the bound is the triggers'.
func appendHistory(ctx context.Context, tx *sql.Tx, lastSeq, insert *sql.Stmt, id string, entries []HistoryEntry) error {
	if len(entries) == 0 {
		return nil
	}
	var last int64
	if err := tx.StmtContext(ctx, lastSeq).QueryRowContext(ctx, id).Scan(&last); err != nil {
		return fmt.Errorf("read history: %w", err)
	}
	ins := tx.StmtContext(ctx, insert)
	for i, e := range entries {
		if _, err := ins.ExecContext(ctx, id, last+int64(i)+1, e.At.UnixNano(), string(e.Event), string(e.State), e.Reason, e.Message); err != nil {
			return fmt.Errorf("record history: %w", err)
		}
	}
	return nil
}

// sameObserved reports whether a and b say the same of their spoke's pod.
func sameObserved(a, b *WorkPod) bool {
	if a.Node != b.Node || a.Progress != b.Progress || (a.Waiting == nil) != (b.Waiting == nil) {
		return false
	}
	return a.Waiting == nil || (a.Waiting.Reason == b.Waiting.Reason && a.Waiting.Message == b.Waiting.Message &&
		a.Waiting.Since.Equal(b.Waiting.Since))
}

// waitingArgs are the waiting columns' values for w: empty and NULL when
// nothing holds the pod.
func waitingArgs(w *Waiting) (reason, message string, since any) {
	if w == nil {
		return "", "", nil
	}
	return w.Reason, w.Message, w.Since.UnixNano()
}

func (s *sqlStore) PodHistory(ctx context.Context, id string) ([]HistoryEntry, error) {
	rows, err := s.query(ctx, s.r, s.d.rebind(`SELECT occurred_at, event, state, reason, message
		FROM pod_history WHERE pod_id = ? ORDER BY seq`), id)
	if err != nil {
		return nil, fmt.Errorf("history of %s: %w", id, err)
	}
	defer rows.Close()
	entries := []HistoryEntry{}
	for rows.Next() {
		var (
			e            HistoryEntry
			at           int64
			event, state string
		)
		if err := rows.Scan(&at, &event, &state, &e.Reason, &e.Message); err != nil {
			return nil, fmt.Errorf("history of %s: %w", id, err)
		}
		e.At, e.Event, e.State = fromNanos(at), Event(event), State(state)
		entries = append(entries, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("history of %s: %w", id, err)
	}
	return entries, nil
}

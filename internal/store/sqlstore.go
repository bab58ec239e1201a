package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"
)

// sqlStore implements Store over database/sql for both dialects. The SQL is
// shared; the few differences (placeholders, row locks) are decided by d.
type sqlStore struct {
	d     dialect
	w     *sql.DB // writes and read-modify-writes
	r     *sql.DB // plain reads; the same pool as w on PostgreSQL
	clock clock
	// transitions caches TransitionWorkPod's statements by shape.
	transitions sync.Map
	stmts       stmts
}

var _ Store = (*sqlStore)(nil)

// clock hands out strictly increasing UTC timestamps, so that rows created by
// one Store sort in creation order even when the wall clock is coarse.
type clock struct {
	mu   sync.Mutex
	last int64
}

func (c *clock) now() int64 {
	n := time.Now().UnixNano()
	c.mu.Lock()
	defer c.mu.Unlock()
	if n <= c.last {
		n = c.last + 1
	}
	c.last = n
	return n
}

// Times are stored as unix nanoseconds: exact, UTC by construction, ordered
// as integers, and the same on both backends.
var (
	minTime = time.Unix(0, math.MinInt64)
	maxTime = time.Unix(0, math.MaxInt64)
)

func toNanos(t time.Time) (int64, error) {
	if t.Before(minTime) || t.After(maxTime) {
		return 0, fmt.Errorf("time %s out of range", t.Format(time.RFC3339Nano))
	}
	return t.UnixNano(), nil
}

func fromNanos(n int64) time.Time { return time.Unix(0, n).UTC() }

const podColumns = `id, cluster, namespace, kind, state, pod_uid, spec, exit_code, reason, log_collected, created_at, updated_at, finished_at, submitter, idempotency_key, request_sha256, placement, ` + observedColumns

// podColumnsWithoutSpec reads NULL for the spec, which scans as nil.
const podColumnsWithoutSpec = `id, cluster, namespace, kind, state, pod_uid, NULL, exit_code, reason, log_collected, created_at, updated_at, finished_at, submitter, idempotency_key, request_sha256, placement, ` + observedColumns

// observedColumns are what ObservePod writes.
const observedColumns = `node, progress, waiting_reason, waiting_message, waiting_since`

type scanner interface{ Scan(dest ...any) error }

func scanWorkPod(sc scanner) (WorkPod, error) {
	var (
		p                WorkPod
		state            string
		exit, finished   sql.NullInt64
		created, updated int64
		key              sql.NullString
		placement        string
		progress         string
		wait             Waiting
		since            sql.NullInt64
	)
	err := sc.Scan(&p.ID, &p.Cluster, &p.Namespace, &p.Kind, &state, &p.PodUID, &p.Spec, &exit,
		&p.Reason, &p.LogCollected, &created, &updated, &finished, &p.Submitter, &key, &p.RequestSHA256, &placement,
		&p.Node, &progress, &wait.Reason, &wait.Message, &since)
	if err != nil {
		return WorkPod{}, err
	}
	p.IdempotencyKey = key.String
	if p.Placement, err = decodePlacement(placement); err != nil {
		return WorkPod{}, fmt.Errorf("work pod %s: %w", p.ID, err)
	}
	p.State, p.Progress = State(state), Event(progress)
	if since.Valid {
		wait.Since = fromNanos(since.Int64)
		p.Waiting = &wait
	}
	if len(p.Spec) == 0 {
		p.Spec = nil
	}
	if exit.Valid {
		code := int32(exit.Int64)
		p.ExitCode = &code
	}
	p.CreatedAt, p.UpdatedAt = fromNanos(created), fromNanos(updated)
	if finished.Valid {
		t := fromNanos(finished.Int64)
		p.FinishedAt = &t
	}
	return p, nil
}

// mutableArgs returns, in column order namespace … finished_at, the values
// of the columns UpdateWorkPod may change (all but id, cluster, created_at
// and what ObservePod writes).
func mutableArgs(p *WorkPod, updated int64) ([]any, error) {
	var exit, finished any
	if p.ExitCode != nil {
		exit = int64(*p.ExitCode)
	}
	if p.FinishedAt != nil {
		n, err := toNanos(*p.FinishedAt)
		if err != nil {
			return nil, fmt.Errorf("finished at: %w", err)
		}
		finished = n
	}
	spec := p.Spec
	if spec == nil {
		spec = []byte{} // the column is NOT NULL; nil and empty are the same
	}
	return []any{p.Namespace, p.Kind, string(p.State), p.PodUID, spec, exit, p.Reason, p.LogCollected, updated, finished}, nil
}

// normalize makes p what a later GetWorkPod would return.
func normalize(p *WorkPod) {
	if len(p.Spec) == 0 {
		p.Spec = nil
	}
	if p.FinishedAt != nil {
		t := fromNanos(p.FinishedAt.UnixNano())
		p.FinishedAt = &t
	}
	if p.ExitCode != nil {
		code := *p.ExitCode
		p.ExitCode = &code
	}
	if p.Waiting != nil {
		w := *p.Waiting
		w.Since = fromNanos(w.Since.UnixNano())
		p.Waiting = &w
	}
}

func (s *sqlStore) CreateWorkPod(ctx context.Context, p WorkPod) (WorkPod, error) {
	if err := p.validate(); err != nil {
		return WorkPod{}, fmt.Errorf("create work pod %s: %w", p.ID, err)
	}
	if !sameObserved(&p, &WorkPod{}) {
		return WorkPod{}, fmt.Errorf("create work pod %s: node, progress and waiting are ObservePod's to write", p.ID)
	}
	now := s.clock.now()
	rest, err := mutableArgs(&p, now)
	if err != nil {
		return WorkPod{}, fmt.Errorf("create work pod %s: %w", p.ID, err)
	}
	var key any // NULL: no key, and not in the unique index
	if p.IdempotencyKey != "" {
		key = p.IdempotencyKey
	}
	placement, err := encodePlacement(p.Placement)
	if err != nil {
		return WorkPod{}, fmt.Errorf("create work pod %s: %w", p.ID, err)
	}
	args := append([]any{p.ID, p.Cluster, now, p.Submitter, key, p.RequestSHA256, placement}, rest...)
	if _, fenced := FenceFrom(ctx); fenced {
		err = s.createFenced(ctx, p, args)
	} else {
		err = s.insertWorkPod(ctx, nil, p, args)
	}
	if err != nil {
		return WorkPod{}, fmt.Errorf("create work pod %s: %w", p.ID, err)
	}
	p.CreatedAt, p.UpdatedAt = fromNanos(now), fromNanos(now)
	normalize(&p)
	return p, nil
}

// insertSQL has no conflict target: a taken id and a taken (submitter,
// key) both leave the insert a no-op, and conflictOf says which it was.
const insertSQL = `INSERT INTO work_pods
	(id, cluster, created_at, submitter, idempotency_key, request_sha256, placement, namespace, kind, state, pod_uid, spec, exit_code, reason, log_collected, updated_at, finished_at)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
	ON CONFLICT DO NOTHING`

// insertWorkPod runs insertSQL on the write pool, or in tx when it is not
// nil.
func (s *sqlStore) insertWorkPod(ctx context.Context, tx *sql.Tx, p WorkPod, args []any) error {
	st, err := s.stmts.get(ctx, s.w, s.d.rebind(insertSQL))
	if err != nil {
		return err
	}
	var q querier = s.w
	if tx != nil {
		st, q = tx.StmtContext(ctx, st), tx
	}
	res, err := st.ExecContext(ctx, args...)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n > 0 {
		return err
	}
	return s.conflictOf(ctx, q, p)
}

// createFenced inserts p in a transaction that first claims the fence's
// epoch; a row created under a fence is the fence's cluster's.
func (s *sqlStore) createFenced(ctx context.Context, p WorkPod, args []any) error {
	// Prepared before the transaction: on SQLite it holds the only write
	// connection, which a prepare inside it would wait for.
	if _, err := s.stmts.get(ctx, s.w, s.d.rebind(insertSQL)); err != nil {
		return err
	}
	tx, f, err := s.beginWrite(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }() // no-op after Commit
	if err := f.owns(p.ID, p.Cluster); err != nil {
		return err
	}
	if err := s.insertWorkPod(ctx, tx, p, args); err != nil {
		return err
	}
	return tx.Commit()
}

// querier is what a lookup runs on: the write pool, or the transaction of
// the write it explains.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// listQuery is the SELECT ListWorkPods runs for f, with its arguments.
func listQuery(f Filter) (q string, args []any, err error) {
	if f.Limit < 0 {
		return "", nil, fmt.Errorf("negative limit %d", f.Limit)
	}
	var where []string
	if f.Cluster != "" {
		where = append(where, "cluster = ?")
		args = append(args, f.Cluster)
	}
	if f.Kind != "" {
		where = append(where, "kind = ?")
		args = append(args, f.Kind)
	}
	if len(f.States) > 0 {
		where = append(where, "state IN (?"+strings.Repeat(", ?", len(f.States)-1)+")")
		for _, st := range f.States {
			args = append(args, string(st))
		}
	}
	if !f.CreatedSince.IsZero() {
		since, err := toNanos(f.CreatedSince)
		if err != nil {
			return "", nil, fmt.Errorf("created since: %w", err)
		}
		where = append(where, "created_at >= ?")
		args = append(args, since)
	}
	if f.Placed {
		where = append(where, "placement <> ''")
	}
	if f.After != nil {
		after, err := toNanos(f.After.CreatedAt)
		if err != nil {
			return "", nil, fmt.Errorf("cursor: %w", err)
		}
		where = append(where, "(created_at < ? OR (created_at = ? AND id > ?))")
		args = append(args, after, after, f.After.ID)
	}
	cols := podColumns
	if f.WithoutSpec {
		cols = podColumnsWithoutSpec
	}
	q = `SELECT ` + cols + ` FROM work_pods`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY created_at DESC, id`
	if f.Limit > 0 {
		q += ` LIMIT ?`
		args = append(args, f.Limit)
	}
	return q, args, nil
}

func (s *sqlStore) ListWorkPods(ctx context.Context, f Filter) ([]WorkPod, error) {
	q, args, err := listQuery(f)
	if err != nil {
		return nil, fmt.Errorf("list work pods: %w", err)
	}
	rows, err := s.r.QueryContext(ctx, s.d.rebind(q), args...)
	if err != nil {
		return nil, fmt.Errorf("list work pods: %w", err)
	}
	defer rows.Close()
	pods := []WorkPod{}
	for rows.Next() {
		p, err := scanWorkPod(rows)
		if err != nil {
			return nil, fmt.Errorf("list work pods: %w", err)
		}
		pods = append(pods, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list work pods: %w", err)
	}
	return pods, nil
}

func (s *sqlStore) UpdateWorkPod(ctx context.Context, id string, fn func(*WorkPod) error) (WorkPod, error) {
	p, err := s.updateWorkPod(ctx, id, fn)
	if err != nil {
		return WorkPod{}, fmt.Errorf("update work pod %s: %w", id, err)
	}
	return p, nil
}

// updateSQL writes every mutable column of a row.
const updateSQL = `UPDATE work_pods SET
	namespace = ?, kind = ?, state = ?, pod_uid = ?, spec = ?, exit_code = ?, reason = ?,
	log_collected = ?, updated_at = ?, finished_at = ?, waiting_reason = ?, waiting_message = ?, waiting_since = ?
	WHERE id = ?`

// updateWorkPod is the read-modify-write. On SQLite the transaction began
// with BEGIN IMMEDIATE and holds the database's write lock from the read on;
// on PostgreSQL SELECT … FOR UPDATE locks the row against other replicas.
func (s *sqlStore) updateWorkPod(ctx context.Context, id string, fn func(*WorkPod) error) (WorkPod, error) {
	q := `SELECT ` + podColumns + ` FROM work_pods WHERE id = ?`
	if s.d == dialectPostgres {
		q += ` FOR UPDATE`
	}
	sts, err := s.prepareWrite(ctx, s.d.rebind(q), s.d.rebind(updateSQL))
	if err != nil {
		return WorkPod{}, err
	}
	tx, f, err := s.beginWrite(ctx)
	if err != nil {
		return WorkPod{}, err
	}
	defer func() { _ = tx.Rollback() }() // no-op after Commit; also covers a panicking fn

	old, err := scanWorkPod(tx.StmtContext(ctx, sts[0]).QueryRowContext(ctx, id))
	if errors.Is(err, sql.ErrNoRows) {
		return WorkPod{}, ErrNotFound
	}
	if err != nil {
		return WorkPod{}, err
	}
	if err := f.owns(id, old.Cluster); err != nil {
		return WorkPod{}, err
	}
	p := old
	if old.Waiting != nil { // fn gets its own, so a change to it is seen
		w := *old.Waiting
		p.Waiting = &w
	}
	if err := fn(&p); err != nil {
		return WorkPod{}, err
	}
	switch {
	case p.ID != old.ID:
		return WorkPod{}, fmt.Errorf("%w: id", ErrImmutable)
	case p.Cluster != old.Cluster:
		return WorkPod{}, fmt.Errorf("%w: cluster", ErrImmutable)
	case !p.CreatedAt.Equal(old.CreatedAt):
		return WorkPod{}, fmt.Errorf("%w: created at", ErrImmutable)
	case p.Submitter != old.Submitter:
		return WorkPod{}, fmt.Errorf("%w: submitter", ErrImmutable)
	case p.IdempotencyKey != old.IdempotencyKey || p.RequestSHA256 != old.RequestSHA256:
		return WorkPod{}, fmt.Errorf("%w: idempotency key", ErrImmutable)
	case !samePlacement(p.Placement, old.Placement):
		return WorkPod{}, fmt.Errorf("%w: placement", ErrImmutable)
	case !sameObserved(&p, &old):
		return WorkPod{}, fmt.Errorf("%w: node, progress or waiting", ErrImmutable)
	}
	if err := p.validate(); err != nil {
		return WorkPod{}, err
	}
	if p.State.Terminal() {
		p.Waiting = nil // a finished pod waits for nothing
	}
	now := s.clock.now()
	args, err := mutableArgs(&p, now)
	if err != nil {
		return WorkPod{}, err
	}
	reason, message, since := waitingArgs(p.Waiting)
	_, err = tx.StmtContext(ctx, sts[1]).ExecContext(ctx, append(args, reason, message, since, id)...)
	if err != nil {
		return WorkPod{}, err
	}
	if err := tx.Commit(); err != nil {
		return WorkPod{}, err
	}
	p.CreatedAt, p.UpdatedAt = old.CreatedAt, fromNanos(now)
	normalize(&p)
	return p, nil
}

func (s *sqlStore) PutArtifact(ctx context.Context, a Artifact, q Quota) (bool, error) {
	created, err := s.putArtifact(ctx, a, q)
	if err != nil {
		return false, fmt.Errorf("put artifact %s/%s: %w", a.PodID, a.Kind, err)
	}
	return created, nil
}

// putArtifact decides in one transaction that holds the pod's row: on
// SQLite the write lock (BEGIN IMMEDIATE), on PostgreSQL the row lock of
// SELECT … FOR UPDATE. Every writer of one pod's artifacts, on every
// replica, passes through it one at a time, so the first claim of a kind
// wins and a quota cannot be overrun by writers that each saw room. Claims
// of different pods meet at the total of all artifacts (checkTotal).
func (s *sqlStore) putArtifact(ctx context.Context, a Artifact, q Quota) (bool, error) {
	switch {
	case a.PodID == "" || a.Kind == "":
		return false, errors.New("empty pod id or kind")
	case a.Size < 0:
		return false, fmt.Errorf("negative size %d", a.Size)
	case a.SHA256 == "":
		return false, errors.New("empty sha256")
	case a.Source != SourceController && a.Source != SourcePod:
		return false, fmt.Errorf("unknown source %q", a.Source)
	}
	tx, f, err := s.beginWrite(ctx)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback() }() // no-op after Commit

	lock := `SELECT cluster FROM work_pods WHERE id = ?`
	if s.d == dialectPostgres {
		lock += ` FOR UPDATE`
	}
	var cluster string
	if err := tx.QueryRowContext(ctx, s.d.rebind(lock), a.PodID).Scan(&cluster); errors.Is(err, sql.ErrNoRows) {
		return false, ErrNotFound
	} else if err != nil {
		return false, err
	}
	if err := f.owns(a.PodID, cluster); err != nil {
		return false, err
	}
	have, err := scanArtifact(tx.QueryRowContext(ctx, s.d.rebind(`SELECT `+artifactColumns+`
		FROM artifacts WHERE pod_id = ? AND kind = ?`), a.PodID, a.Kind))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		if err := s.checkQuota(ctx, tx, a, q); err != nil {
			return false, err
		}
		if err := s.checkTotal(ctx, tx, a, q); err != nil {
			return false, err
		}
		_, err = tx.ExecContext(ctx, s.d.rebind(`INSERT INTO artifacts (pod_id, kind, size, sha256, source, created_at)
			VALUES (?, ?, ?, ?, ?, ?)`), a.PodID, a.Kind, a.Size, a.SHA256, string(a.Source), s.clock.now())
	case err != nil:
		return false, err
	case have.Source == SourcePod && a.Source == SourceController:
		_, err = tx.ExecContext(ctx, s.d.rebind(`UPDATE artifacts SET size = ?, sha256 = ?, source = ?, created_at = ?
			WHERE pod_id = ? AND kind = ?`), a.Size, a.SHA256, string(a.Source), s.clock.now(), a.PodID, a.Kind)
	case have.SHA256 != a.SHA256 || have.Source != a.Source:
		return false, fmt.Errorf("%w: recorded by %s with sha256 %s", ErrConflict, have.Source, have.SHA256)
	default:
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, tx.Commit()
}

func (s *sqlStore) GetArtifact(ctx context.Context, podID, kind string) (Artifact, error) {
	a, err := s.getArtifact(ctx, s.r, podID, kind)
	if err != nil {
		return Artifact{}, fmt.Errorf("get artifact %s/%s: %w", podID, kind, err)
	}
	return a, nil
}

const artifactColumns = `pod_id, kind, size, sha256, source, created_at`

func (s *sqlStore) getArtifact(ctx context.Context, db *sql.DB, podID, kind string) (Artifact, error) {
	row := s.queryRow(ctx, db, s.d.rebind(`SELECT `+artifactColumns+`
		FROM artifacts WHERE pod_id = ? AND kind = ?`), podID, kind)
	a, err := scanArtifact(row)
	if errors.Is(err, sql.ErrNoRows) {
		return Artifact{}, ErrNotFound
	}
	return a, err
}

func (s *sqlStore) ListArtifacts(ctx context.Context, podID string) ([]Artifact, error) {
	rows, err := s.query(ctx, s.r, s.d.rebind(`SELECT `+artifactColumns+`
		FROM artifacts WHERE pod_id = ? ORDER BY kind`), podID)
	if err != nil {
		return nil, fmt.Errorf("list artifacts of %s: %w", podID, err)
	}
	defer rows.Close()
	arts := []Artifact{}
	for rows.Next() {
		a, err := scanArtifact(rows)
		if err != nil {
			return nil, fmt.Errorf("list artifacts of %s: %w", podID, err)
		}
		arts = append(arts, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list artifacts of %s: %w", podID, err)
	}
	return arts, nil
}

func scanArtifact(sc scanner) (Artifact, error) {
	var (
		a       Artifact
		source  string
		created int64
	)
	if err := sc.Scan(&a.PodID, &a.Kind, &a.Size, &a.SHA256, &source, &created); err != nil {
		return Artifact{}, err
	}
	a.Source = Source(source)
	a.CreatedAt = fromNanos(created)
	return a, nil
}

func (s *sqlStore) Close() error {
	errs := []error{s.stmts.close()}
	if s.r != s.w {
		errs = append(errs, s.r.Close())
	}
	errs = append(errs, s.w.Close())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close store: %w", err)
	}
	return nil
}

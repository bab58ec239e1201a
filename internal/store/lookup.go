package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
)

func (s *sqlStore) GetWorkPod(ctx context.Context, id string) (WorkPod, error) {
	row := s.queryRow(ctx, s.r, s.d.rebind(`SELECT `+podColumns+` FROM work_pods WHERE id = ?`), id)
	p, err := scanWorkPod(row)
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return WorkPod{}, fmt.Errorf("get work pod %s: %w", id, err)
	}
	return p, nil
}

// getWorkPodsChunk bounds the ids of one GetWorkPods query, far below
// both databases' limits on bound parameters (SQLite 32,766, PostgreSQL
// 65,535).
const getWorkPodsChunk = 500

func (s *sqlStore) GetWorkPods(ctx context.Context, ids []string) (map[string]WorkPod, error) {
	out := make(map[string]WorkPod, len(ids))
	for chunk := range slices.Chunk(ids, getWorkPodsChunk) {
		if err := s.getWorkPods(ctx, chunk, out); err != nil {
			return nil, fmt.Errorf("get %d work pods: %w", len(ids), err)
		}
	}
	return out, nil
}

func (s *sqlStore) getWorkPods(ctx context.Context, ids []string, out map[string]WorkPod) error {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	q := `SELECT ` + podColumnsWithoutSpec + ` FROM work_pods WHERE id IN (?` + strings.Repeat(`, ?`, len(ids)-1) + `)`
	rows, err := s.r.QueryContext(ctx, s.d.rebind(q), args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		p, err := scanWorkPod(rows)
		if err != nil {
			return err
		}
		out[p.ID] = p
	}
	return rows.Err()
}

// conflictOf says why the insert of p wrote nothing: ErrKeyTaken when the
// submitter's key is taken (checked first: a retried submit carries a new
// id but the old key), else ErrConflict for the id. Rows are never deleted,
// so the row that beat the insert is still there to be found; it is read
// through q, the write pool or the insert's transaction, which saw the
// insert's conflict.
func (s *sqlStore) conflictOf(ctx context.Context, q querier, p WorkPod) error {
	if p.IdempotencyKey == "" {
		return ErrConflict
	}
	var id string
	err := q.QueryRowContext(ctx, s.d.rebind(`SELECT id FROM work_pods WHERE submitter = ? AND idempotency_key = ?`),
		p.Submitter, p.IdempotencyKey).Scan(&id)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return ErrConflict
	case err != nil:
		return err
	}
	return fmt.Errorf("%w by work pod %s", ErrKeyTaken, id)
}

func (s *sqlStore) GetWorkPodByKey(ctx context.Context, submitter, key string) (WorkPod, error) {
	if key == "" {
		return WorkPod{}, fmt.Errorf("get work pod by key: empty key: %w", ErrNotFound)
	}
	row := s.r.QueryRowContext(ctx, s.d.rebind(`SELECT `+podColumns+` FROM work_pods
		WHERE submitter = ? AND idempotency_key = ?`), submitter, key)
	p, err := scanWorkPod(row)
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return WorkPod{}, fmt.Errorf("get work pod by key: %w", err)
	}
	return p, nil
}

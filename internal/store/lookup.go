package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

func (s *sqlStore) GetWorkPod(ctx context.Context, id string) (WorkPod, error) {
	row := s.r.QueryRowContext(ctx, s.d.rebind(`SELECT `+podColumns+` FROM work_pods WHERE id = ?`), id)
	p, err := scanWorkPod(row)
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return WorkPod{}, fmt.Errorf("get work pod %s: %w", id, err)
	}
	return p, nil
}

// conflictOf says why the insert of p wrote nothing: ErrKeyTaken when the
// submitter's key is taken (checked first: a retried submit carries a new
// id but the old key), else ErrConflict for the id. Rows are never deleted,
// so the row that beat the insert is still there to be found; it is read
// through the write pool, which saw the insert's conflict.
func (s *sqlStore) conflictOf(ctx context.Context, p WorkPod) error {
	if p.IdempotencyKey == "" {
		return ErrConflict
	}
	var id string
	err := s.w.QueryRowContext(ctx, s.d.rebind(`SELECT id FROM work_pods WHERE submitter = ? AND idempotency_key = ?`),
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

package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// checkQuota counts the pod's artifacts of a's source inside the claiming
// transaction.
func (s *sqlStore) checkQuota(ctx context.Context, tx *sql.Tx, a Artifact, q Quota) error {
	if q.MaxKinds <= 0 && q.MaxBytes <= 0 {
		return nil
	}
	var kinds, bytes int64
	err := tx.QueryRowContext(ctx, s.d.rebind(`SELECT COUNT(*), COALESCE(SUM(size), 0) FROM artifacts
		WHERE pod_id = ? AND source = ?`), a.PodID, string(a.Source)).Scan(&kinds, &bytes)
	if err != nil {
		return err
	}
	switch {
	case q.MaxKinds > 0 && kinds+1 > int64(q.MaxKinds):
		return fmt.Errorf("%w: pod has %d artifacts, at most %d", ErrQuota, kinds, q.MaxKinds)
	case q.MaxBytes > 0 && bytes+a.Size > q.MaxBytes:
		return fmt.Errorf("%w: pod has %d bytes of artifacts, %d more would pass %d", ErrQuota, bytes, a.Size, q.MaxBytes)
	}
	return nil
}

// totalQuery reads the sum that triggers keep of every artifact's size
// (migration 0007): one row, however many artifacts there are.
const totalQuery = `SELECT bytes FROM artifact_total WHERE id = 1`

// checkTotal holds the claim to q.MaxTotalBytes, inside the claiming
// transaction, after the pod's own quota (which a retry cannot cure, so it
// is the answer when both are passed).
//
// It is exact on both backends. On SQLite the transaction is the only
// writer. On PostgreSQL (READ COMMITTED) it locks the total's row: every
// change of artifacts updates that row by trigger and holds its lock until
// it commits, so the claim waits for writers in flight — on any replica —
// and then reads the sum they committed; its own insert then updates the
// row it holds. What this costs is that claims of all pods queue for a
// moment (one short transaction each) instead of running side by side.
// Pod rows are always locked before the total's, by every writer, so the
// queue cannot deadlock.
func (s *sqlStore) checkTotal(ctx context.Context, tx *sql.Tx, a Artifact, q Quota) error {
	if q.MaxTotalBytes <= 0 {
		return nil
	}
	query := totalQuery
	if s.d == dialectPostgres {
		query += ` FOR UPDATE`
	}
	total, err := scanTotal(tx.QueryRowContext(ctx, query))
	if err != nil {
		return err
	}
	if total+a.Size > q.MaxTotalBytes {
		return fmt.Errorf("%w: artifacts hold %d bytes, %d more would pass %d", ErrFull, total, a.Size, q.MaxTotalBytes)
	}
	return nil
}

func (s *sqlStore) ArtifactBytes(ctx context.Context) (int64, error) {
	return scanTotal(s.queryRow(ctx, s.r, totalQuery))
}

func scanTotal(sc scanner) (int64, error) {
	var total int64
	err := sc.Scan(&total)
	if errors.Is(err, sql.ErrNoRows) {
		err = errors.New("table artifact_total has no row id 1 (migration 0007 inserts it; was it deleted?)")
	}
	if err != nil {
		return 0, fmt.Errorf("read the artifacts' total: %w", err)
	}
	return total, nil
}

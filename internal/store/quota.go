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

// checkTotal holds the claim to q.MaxTotalBytes, q.MaxSubmitterBytes and
// q.MaxClusterBytes, inside the claiming transaction, after the pod's own
// quota (which a retry cannot cure, so it is the answer when both are
// passed).
//
// It is exact on both backends. On SQLite the transaction is the only
// writer. On PostgreSQL (READ COMMITTED) it locks the total's row: every
// change of artifacts updates that row by trigger and holds its lock until
// it commits, so the claim waits for writers in flight — on any replica —
// and then reads the sum they committed; its own insert then updates the
// row it holds. The submitter's and the cluster's sums are read after that
// lock, so they too see every committed writer and none in flight. What
// this costs is that claims of all pods queue for a moment (one short
// transaction each) instead of running side by side. Pod rows are always
// locked before the total's, by every writer, so the queue cannot
// deadlock.
func (s *sqlStore) checkTotal(ctx context.Context, tx *sql.Tx, a Artifact, q Quota) error {
	if q.MaxTotalBytes <= 0 && q.MaxSubmitterBytes <= 0 && q.MaxClusterBytes <= 0 {
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
	if q.MaxTotalBytes > 0 && total+a.Size > q.MaxTotalBytes {
		return &FullError{Budget: BudgetTotal, Used: total, Add: a.Size, Limit: q.MaxTotalBytes}
	}
	for _, b := range []struct {
		budget Budget
		limit  int64
	}{{BudgetSubmitter, q.MaxSubmitterBytes}, {BudgetCluster, q.MaxClusterBytes}} {
		// What one submitter or cluster holds is part of the total: while
		// the total itself fits the budget, so does every share of it, and
		// the sum (a walk over the pods' rows) is not needed.
		if b.limit <= 0 || total+a.Size <= b.limit {
			continue
		}
		of, used, err := s.budgetBytes(ctx, tx, a.PodID, b.budget)
		if err != nil {
			return err
		}
		if used+a.Size > b.limit {
			return &FullError{Budget: b.budget, Of: of, Used: used, Add: a.Size, Limit: b.limit}
		}
	}
	return nil
}

// budgetColumns are the work_pods columns of the budgets that are sums.
var budgetColumns = map[Budget]string{BudgetSubmitter: "submitter", BudgetCluster: "cluster"}

// budgetBytes sums the artifacts of every pod that shares podID's
// submitter or cluster (q, a transaction or the pool) and returns whose.
// The cluster's sum walks index work_pods_cluster_state; the submitter's
// the pods of every cluster (no index leads with submitter), bounded by
// the rows the sweep has not yet deleted. Measured with 10,000 pods of one
// submitter on one cluster: a claim that sums both takes ~16 ms on
// PostgreSQL and ~15 ms on SQLite, against ~1.9 and ~0.45 ms with the
// total alone (BenchmarkClaimBudgets); checkTotal sums only once the total
// has passed the budget. A trigger-kept table of the sums (as artifact_total
// is) would make it one row read, at the cost of a migration.
func (s *sqlStore) budgetBytes(ctx context.Context, q querier, podID string, b Budget) (of string, used int64, err error) {
	column, ok := budgetColumns[b]
	if !ok {
		return "", 0, fmt.Errorf("budget %q is no sum of pods", b)
	}
	err = q.QueryRowContext(ctx, s.d.rebind(`SELECT p.`+column+`, COALESCE((SELECT SUM(a.size) FROM work_pods w
		JOIN artifacts a ON a.pod_id = w.id WHERE w.`+column+` = p.`+column+`), 0)
		FROM work_pods p WHERE p.id = ?`), podID).Scan(&of, &used)
	if errors.Is(err, sql.ErrNoRows) {
		return "", 0, ErrNotFound
	}
	if err != nil {
		return "", 0, fmt.Errorf("sum the artifacts of pod %s's %s: %w", podID, column, err)
	}
	return of, used, nil
}

func (s *sqlStore) BudgetBytes(ctx context.Context, podID string, b Budget) (string, int64, error) {
	return s.budgetBytes(ctx, s.r, podID, b)
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

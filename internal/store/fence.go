package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// Fence is the claim a spoke's owner puts on its writes: it owns Cluster's
// reconcile loops for Epoch, a number that grows with every new owner (the
// spoke's Lease on the hub). A replica that paused while another took the
// Lease over still carries its old epoch when it wakes, and the store
// refuses its writes (ErrFenced) instead of letting them overwrite what the
// new owner wrote.
type Fence struct {
	Cluster string
	Epoch   int64
}

type fenceKey struct{}

// WithFence returns ctx carrying the fence of cluster's owner at epoch.
// Every write made with it is fenced (see Store); a context without one,
// as the API's submits on any replica use, writes unfenced.
func WithFence(ctx context.Context, cluster string, epoch int64) context.Context {
	return context.WithValue(ctx, fenceKey{}, Fence{Cluster: cluster, Epoch: epoch})
}

// WithoutFence returns ctx without a fence: a write made with it is
// unfenced, as a submit's are. A spoke's loop that moved a row to another
// spoke records the new pod so (its own fence does not cover that row).
func WithoutFence(ctx context.Context) context.Context {
	return context.WithValue(ctx, fenceKey{}, nil)
}

// FenceFrom returns the fence ctx carries, if any.
func FenceFrom(ctx context.Context) (Fence, bool) {
	f, ok := ctx.Value(fenceKey{}).(Fence)
	return f, ok
}

func (f Fence) validate() error {
	switch {
	case f.Cluster == "":
		return errors.New("fence: empty cluster")
	case f.Epoch < 0:
		return fmt.Errorf("fence of cluster %s: negative epoch %d", f.Cluster, f.Epoch)
	}
	return nil
}

// owns refuses a fenced write to a row of another cluster: a loop of one
// spoke never writes another's rows, whatever epoch it holds there. A nil
// f, an unfenced write, owns every row.
func (f *Fence) owns(id, cluster string) error {
	if f == nil || cluster == f.Cluster {
		return nil
	}
	return fmt.Errorf("%w: work pod %s is cluster %s's, the fence is cluster %s's", ErrFenced, id, cluster, f.Cluster)
}

// claimSQL raises the cluster's epoch to the fence's, or leaves it when it
// is higher: then no row is affected and the claim is refused.
const claimSQL = `INSERT INTO spoke_epochs (cluster, epoch) VALUES (?, ?)
	ON CONFLICT (cluster) DO UPDATE SET epoch = excluded.epoch WHERE spoke_epochs.epoch <= excluded.epoch`

// epochSQL reads a cluster's epoch. A fenced write reads there the fence's
// own epoch and holds the row until it commits: on PostgreSQL with FOR
// SHARE, so that one owner's writers run side by side, on SQLite by being
// the only writer. Raising the epoch (ClaimEpoch, or the first fenced write
// of a new epoch) is claimSQL in a transaction of its own, which on
// PostgreSQL waits for the share locks of the older epoch's writes in
// flight; once it commits, every later write of an older epoch reads the
// newer one and is refused. So no write of an older epoch commits after a
// newer epoch is claimed. The raise holds no other lock and every write
// takes this one before any other, so it cannot be part of a deadlock.
const epochSQL = `SELECT epoch FROM spoke_epochs WHERE cluster = ?`

func (s *sqlStore) ClaimEpoch(ctx context.Context, cluster string, epoch int64) error {
	f := Fence{Cluster: cluster, Epoch: epoch}
	err := f.validate()
	if err == nil {
		err = s.raise(ctx, f)
	}
	if err != nil {
		return fmt.Errorf("claim epoch %d of cluster %s: %w", epoch, cluster, err)
	}
	return nil
}

// raise claims f's epoch for its cluster in a transaction of its own.
func (s *sqlStore) raise(ctx context.Context, f Fence) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }() // no-op after Commit
	res, err := tx.ExecContext(ctx, s.d.rebind(claimSQL), f.Cluster, f.Epoch)
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n > 0 {
		return tx.Commit()
	}
	var newer int64
	if err := tx.QueryRowContext(ctx, s.d.rebind(epochSQL), f.Cluster).Scan(&newer); err != nil {
		return fmt.Errorf("%w: cluster %s: epoch %d is fenced off (reading the newer epoch: %w)", ErrFenced, f.Cluster, f.Epoch, err)
	}
	return fencedOff(f, newer)
}

func fencedOff(f Fence, newer int64) error {
	return fmt.Errorf("%w: cluster %s: epoch %d is fenced off by epoch %d", ErrFenced, f.Cluster, f.Epoch, newer)
}

// beginWrite begins a write transaction. When ctx carries a fence, the
// transaction holds the fence's epoch first (epochSQL; raising it when the
// cluster's is lower) and the fence is returned for the caller to hold its row to
// (Fence.owns); nil when the write is unfenced. A raise commits on its
// own: a fenced write that then fails still has claimed its epoch.
func (s *sqlStore) beginWrite(ctx context.Context) (*sql.Tx, *Fence, error) {
	f, fenced := FenceFrom(ctx)
	if !fenced {
		tx, err := s.w.BeginTx(ctx, nil)
		return tx, nil, err
	}
	if err := f.validate(); err != nil {
		return nil, nil, err
	}
	q := epochSQL
	if s.d == dialectPostgres {
		q += ` FOR SHARE`
	}
	// Prepared before the transaction begins: on SQLite the transaction
	// holds the only write connection.
	hold, err := s.stmts.get(ctx, s.w, s.d.rebind(q))
	if err != nil {
		return nil, nil, err
	}
	for raised := false; ; raised = true {
		tx, err := s.w.BeginTx(ctx, nil)
		if err != nil {
			return nil, nil, err
		}
		held, err := scanEpoch(tx.StmtContext(ctx, hold).QueryRowContext(ctx, f.Cluster), f.Cluster)
		switch {
		case err != nil:
		case held == f.Epoch:
			return tx, &f, nil
		case held > f.Epoch:
			err = fencedOff(f, held)
		case raised: // epochs never fall, nor are their rows deleted
			err = fmt.Errorf("cluster %s: epoch %d claimed, then read back as %d", f.Cluster, f.Epoch, held)
		}
		_ = tx.Rollback()
		if err != nil {
			return nil, nil, err
		}
		if err := s.raise(ctx, f); err != nil {
			return nil, nil, err
		}
	}
}

// scanEpoch reads a cluster's epoch from row (of epochSQL); -1 when none
// was ever claimed.
func scanEpoch(row scanner, cluster string) (int64, error) {
	var epoch int64
	err := row.Scan(&epoch)
	if errors.Is(err, sql.ErrNoRows) {
		return -1, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read the epoch of cluster %s: %w", cluster, err)
	}
	return epoch, nil
}

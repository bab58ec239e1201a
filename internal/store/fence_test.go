package store_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"crucible.dev/crucible/internal/store"
	"crucible.dev/crucible/internal/store/pgtest"
)

// TestPostgresClaimQueuesBehindOlderWrite: on PostgreSQL a new owner's
// claim waits for an old owner's fenced write in flight (the write holds
// its epoch's row to its commit), so the old write commits before the new
// epoch does and none after it. A write that let go of the epoch before
// it commits (a claim in a transaction of its own, a check that locks
// nothing) would let the claim return while the old write still runs,
// which the conformance suite's races only rarely catch. The write is held
// in flight in the two ways a write is fenced: by a transaction (an
// update's fn that waits) and by one statement (a transition waiting for
// a row lock held behind the store's back).
func TestPostgresClaimQueuesBehindOlderWrite(t *testing.T) {
	tests := []struct {
		name string
		// begin starts the old owner's write of row "a" and returns once
		// it holds its epoch: its result, and how to let it finish.
		begin func(t *testing.T, s store.Store, raw *sql.DB, old context.Context) (<-chan error, func())
		// waiting is how many backends wait for a lock while the write
		// is held, before the claim waits too.
		waiting int
	}{
		{"update", beginUpdate, 0},
		{"transition", beginTransition, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			dsn := pgtest.NewDatabase(t)
			s, err := store.Open(ctx, dsn)
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			t.Cleanup(func() { s.Close() })
			raw := rawDB(t, "pgx", dsn)
			if _, err := s.CreateWorkPod(ctx, store.WorkPod{ID: "a", Cluster: "wharf", State: store.StateRunning}); err != nil {
				t.Fatalf("create: %v", err)
			}
			old := store.WithFence(ctx, "wharf", 1)
			if err := s.ClaimEpoch(ctx, "wharf", 1); err != nil {
				t.Fatalf("claim 1: %v", err)
			}

			written, release := tc.begin(t, s, raw, old)
			claimed := make(chan error, 1)
			go func() { claimed <- s.ClaimEpoch(ctx, "wharf", 2) }()
			pollLockWaiters(t, raw, tc.waiting+1, claimed)
			release()
			if err := <-written; err != nil {
				t.Fatalf("old owner's write, begun before the claim: %v", err)
			}
			if err := <-claimed; err != nil {
				t.Fatalf("claim 2: %v", err)
			}
			got, err := s.GetWorkPod(ctx, "a")
			if err != nil || got.Reason != "old" {
				t.Fatalf("row after the old write: %+v, %v; want its reason %q", got, err, "old")
			}
			if _, err := s.TransitionWorkPod(old, "a", store.Transition{Reason: "late"}); !errors.Is(err, store.ErrFenced) {
				t.Errorf("old owner's write after the claim: %v, want ErrFenced", err)
			}
		})
	}
}

// beginUpdate holds an update in flight in its fn.
func beginUpdate(t *testing.T, s store.Store, _ *sql.DB, old context.Context) (<-chan error, func()) {
	inFn, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	written := make(chan error, 1)
	go func() {
		_, err := s.UpdateWorkPod(old, "a", func(p *store.WorkPod) error {
			close(inFn)
			<-release
			p.Reason = "old"
			return nil
		})
		written <- err
	}()
	select {
	case <-inFn:
	case err := <-written:
		t.Fatalf("old owner's update: %v", err)
	}
	return written, unblock
}

// beginTransition holds a transition in flight: a transaction of its own
// locks the row first, so the transition's statement, having read its
// epoch, waits for that lock.
func beginTransition(t *testing.T, s store.Store, raw *sql.DB, old context.Context) (<-chan error, func()) {
	tx, err := raw.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	var once sync.Once
	unblock := func() { once.Do(func() { _ = tx.Commit() }) }
	t.Cleanup(unblock)
	if _, err := tx.ExecContext(t.Context(), `SELECT id FROM work_pods WHERE id = 'a' FOR UPDATE`); err != nil {
		t.Fatalf("lock the row: %v", err)
	}
	written := make(chan error, 1)
	go func() {
		_, err := s.TransitionWorkPod(old, "a", store.Transition{Reason: "old"})
		written <- err
	}()
	pollLockWaiters(t, raw, 1, written)
	return written, unblock
}

// pollLockWaiters waits until n backends of the test's database wait for a
// lock. A result on done before then fails the test: what should wait
// returned.
func pollLockWaiters(t *testing.T, raw *sql.DB, n int, done <-chan error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var waiting int
		err := raw.QueryRowContext(t.Context(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting)
		switch {
		case err != nil:
			t.Fatalf("read pg_stat_activity: %v", err)
		case waiting >= n:
			return
		case time.Now().After(deadline):
			t.Fatalf("%d backends wait for a lock after 30s, want %d", waiting, n)
		}
		select {
		case err := <-done:
			t.Fatalf("returned (%v) while it should wait for the old owner's write in flight", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// WithoutFence takes a fence off a context; a context without one stays so.
func TestWithoutFence(t *testing.T) {
	fenced := store.WithFence(t.Context(), "wharf", 3)
	if _, ok := store.FenceFrom(store.WithoutFence(fenced)); ok {
		t.Error("WithoutFence(fenced) still carries a fence")
	}
	if _, ok := store.FenceFrom(store.WithoutFence(t.Context())); ok {
		t.Error("WithoutFence(unfenced) carries a fence")
	}
	if f, ok := store.FenceFrom(fenced); !ok || f != (store.Fence{Cluster: "wharf", Epoch: 3}) {
		t.Errorf("the fenced context changed: %+v %v", f, ok)
	}
}

package store_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"crucible.dev/crucible/internal/store"
	"crucible.dev/crucible/internal/store/pgtest"
)

func TestIsUnavailableClassifies(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "x"}}
	cases := map[string]struct {
		err  error
		want bool
	}{
		"nil":                     {nil, false},
		"not found":               {fmt.Errorf("get: %w", store.ErrNotFound), false},
		"conflict":                {store.ErrConflict, false},
		"quota":                   {store.ErrQuota, false},
		"fenced":                  {fmt.Errorf("transition: %w", store.ErrFenced), false},
		"plain error":             {errors.New("boom"), false},
		"canceled":                {context.Canceled, false},
		"unique violation":        {&pgconn.PgError{Code: "23505"}, false},
		"syntax error":            {fmt.Errorf("q: %w", &pgconn.PgError{Code: "42601"}), false},
		"admin shutdown":          {fmt.Errorf("q: %w", &pgconn.PgError{Code: "57P01"}), true},
		"crash shutdown":          {&pgconn.PgError{Code: "57P02"}, true},
		"starting up":             {&pgconn.PgError{Code: "57P03"}, true},
		"connection failure":      {&pgconn.PgError{Code: "08006"}, true},
		"too many connections":    {&pgconn.PgError{Code: "53300"}, true},
		"net error":               {fmt.Errorf("q: %w", refused), true},
		"refused":                 {fmt.Errorf("q: %w", syscall.ECONNREFUSED), true},
		"reset":                   {syscall.ECONNRESET, true},
		"unexpected EOF":          {fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true},
		"bad conn":                {driver.ErrBadConn, true},
		"not found beside net":    {errors.Join(store.ErrNotFound, refused), false},
		"pg verdict beside reset": {errors.Join(&pgconn.PgError{Code: "23505"}, syscall.ECONNRESET), false},
	}
	for name, c := range cases {
		if got := store.IsUnavailable(c.err); got != c.want {
			t.Errorf("%s: IsUnavailable(%v) = %v, want %v", name, c.err, got, c.want)
		}
	}
}

// A PostgreSQL server halted under the store: its errors are unavailable
// (not a verdict), and once the server is back the same store works again.
func TestIsUnavailablePostgresRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("PostgreSQL tests skipped in -short mode")
	}
	pg, err := pgtest.Start(t.Context())
	if err != nil {
		t.Fatalf("PostgreSQL: %v; %s", err, pgtest.InstallHint)
	}
	t.Cleanup(func() { _ = pg.Stop() })
	s, err := store.Open(t.Context(), pg.DSN("postgres"))
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	row := func(id string) store.WorkPod {
		return store.WorkPod{ID: id, Cluster: "wharf", Namespace: "ns", Kind: "turn", State: store.StatePending, Spec: []byte("{}")}
	}
	if _, err := s.CreateWorkPod(t.Context(), row("before")); err != nil {
		t.Fatal(err)
	}
	if err := pg.Halt(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	_, err = s.CreateWorkPod(ctx, row("during"))
	if err == nil || !store.IsUnavailable(err) {
		t.Errorf("create while the server is down: %v; IsUnavailable %v, want an unavailable error", err, store.IsUnavailable(err))
	}
	if _, err := s.GetWorkPod(ctx, "before"); err == nil || !store.IsUnavailable(err) {
		t.Errorf("get while the server is down: %v; want an unavailable error", err)
	}
	if err := pg.Resume(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateWorkPod(t.Context(), row("after")); err != nil {
		t.Fatalf("create after the restart: %v", err)
	}
	if _, err := s.GetWorkPod(t.Context(), "before"); err != nil {
		t.Errorf("the row written before the restart: %v", err)
	}
	if _, err := s.CreateWorkPod(t.Context(), row("after")); !errors.Is(err, store.ErrConflict) || store.IsUnavailable(err) {
		t.Errorf("create of an existing id: %v, want ErrConflict and not unavailable", err)
	}
}

// Another connection holding SQLite's write lock past the busy timeout
// makes a write fail unavailable (SQLITE_BUSY), not a verdict.
func TestIsUnavailableSQLiteBusy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := store.Open(t.Context(), path) // creates the schema
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	holder := sqlOpen(t, "file:"+path+"?_txlock=immediate")
	tx, err := holder.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	other := sqlOpen(t, "file:"+path+"?_pragma=busy_timeout(50)")
	_, err = other.ExecContext(t.Context(), `INSERT INTO work_pods (id, cluster, namespace, kind, state, spec, created_at, updated_at)
		VALUES ('x', 'c', 'n', 'turn', 'pending', X'7B7D', 0, 0)`)
	if err == nil || !store.IsUnavailable(err) {
		t.Errorf("write beside a held write lock: %v; want an unavailable error", err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	_, err = other.ExecContext(t.Context(), `INSERT INTO work_pods (id) VALUES ('y')`)
	if err == nil || store.IsUnavailable(err) {
		t.Errorf("a write that breaks a NOT NULL constraint: %v; want an error that is not unavailable", err)
	}
}

func sqlOpen(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

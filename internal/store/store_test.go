package store_test

import (
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"crucible.dev/crucible/internal/store"
	"crucible.dev/crucible/internal/store/pgtest"
	"crucible.dev/crucible/internal/store/storetest"
)

// TestMain shares one throwaway PostgreSQL server among the package's tests
// (started on first use, stopped after the last test).
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

func openPostgres(t *testing.T) store.Store {
	t.Helper()
	s, err := store.Open(t.Context(), pgtest.NewDatabase(t))
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return s
}

func TestSQLite(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return storetest.SQLite(t) })
}

func TestPostgres(t *testing.T) { storetest.Run(t, openPostgres) }

// backend gives a test a fresh database: its DSN, and a raw connection to it
// for looking behind the Store's back.
type backend struct {
	name  string
	fresh func(t *testing.T) (dsn string, raw *sql.DB)
}

var backends = []backend{
	{"sqlite", func(t *testing.T) (string, *sql.DB) {
		path := filepath.Join(t.TempDir(), "state.db")
		return path, rawDB(t, "sqlite", path+"?_pragma=busy_timeout(10000)")
	}},
	{"postgres", func(t *testing.T) (string, *sql.DB) {
		dsn := pgtest.NewDatabase(t)
		return dsn, rawDB(t, "pgx", dsn)
	}},
}

func rawDB(t *testing.T, driver, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatalf("raw open: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

type migration struct {
	Version int
	Name    string
}

func appliedMigrations(t *testing.T, raw *sql.DB) []migration {
	t.Helper()
	rows, err := raw.QueryContext(t.Context(), `SELECT version, name FROM schema_migrations ORDER BY version`)
	if err != nil {
		t.Fatalf("read schema_migrations: %v", err)
	}
	defer rows.Close()
	var got []migration
	for rows.Next() {
		var m migration
		if err := rows.Scan(&m.Version, &m.Name); err != nil {
			t.Fatalf("scan: %v", err)
		}
		got = append(got, m)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("rows: %v", err)
	}
	return got
}

func TestMigrations(t *testing.T) {
	wantApplied := []migration{{1, "init"}, {2, "artifact_source"}, {3, "submitter"}, {4, "artifact_blobs"}, {5, "idempotency_key"}, {6, "pod_history"}, {7, "artifact_total"}, {8, "spoke_epochs"}, {9, "digest_key"}, {10, "placement"}, {11, "mirror_documents"}, {12, "placed_index"}}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Run("reopen is a no-op", func(t *testing.T) {
				dsn, raw := b.fresh(t)
				for i := range 3 {
					s, err := store.Open(t.Context(), dsn)
					if err != nil {
						t.Fatalf("open %d: %v", i, err)
					}
					if i == 0 {
						if _, err := s.CreateWorkPod(t.Context(), store.WorkPod{ID: "keep", Cluster: "c", State: store.StatePending}); err != nil {
							t.Fatalf("create: %v", err)
						}
					}
					if _, err := s.GetWorkPod(t.Context(), "keep"); err != nil {
						t.Errorf("open %d: data lost: %v", i, err)
					}
					s.Close()
				}
				if diff := cmp.Diff(wantApplied, appliedMigrations(t, raw)); diff != "" {
					t.Errorf("schema_migrations (-want +got):\n%s", diff)
				}
			})
			t.Run("concurrent first opens migrate once", func(t *testing.T) {
				dsn, raw := b.fresh(t)
				var wg sync.WaitGroup
				for range 4 {
					wg.Go(func() {
						s, err := store.Open(t.Context(), dsn)
						if err != nil {
							t.Errorf("open: %v", err)
							return
						}
						s.Close()
					})
				}
				wg.Wait()
				if diff := cmp.Diff(wantApplied, appliedMigrations(t, raw)); diff != "" {
					t.Errorf("schema_migrations (-want +got):\n%s", diff)
				}
			})
			t.Run("newer schema is refused", func(t *testing.T) {
				dsn, raw := b.fresh(t)
				s, err := store.Open(t.Context(), dsn)
				if err != nil {
					t.Fatalf("open: %v", err)
				}
				s.Close()
				if _, err := raw.ExecContext(t.Context(),
					`INSERT INTO schema_migrations (version, name, applied_at) VALUES (999, 'from_the_future', 0)`); err != nil {
					t.Fatalf("insert: %v", err)
				}
				s, err = store.Open(t.Context(), dsn)
				if !errors.Is(err, store.ErrSchemaTooNew) {
					if s != nil {
						s.Close()
					}
					t.Fatalf("open: got %v, want ErrSchemaTooNew", err)
				}
				if !strings.Contains(err.Error(), "999") {
					t.Errorf("error %q does not name the database's version", err)
				}
			})
		})
	}
}

// TestSQLiteTwoStoresOneFile: two Stores on one file stand for two processes
// (a controller and an admin command). Their writers contend for SQLite's
// lock; BEGIN IMMEDIATE plus busy_timeout must serialise them without
// SQLITE_BUSY and without lost updates.
func TestSQLiteTwoStoresOneFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	var stores [2]store.Store
	for i := range stores {
		s, err := store.Open(t.Context(), "sqlite:"+path)
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
		t.Cleanup(func() { s.Close() })
		stores[i] = s
	}
	if _, err := stores[0].CreateWorkPod(t.Context(), store.WorkPod{ID: "shared", Cluster: "c", State: store.StateRunning}); err != nil {
		t.Fatalf("create: %v", err)
	}
	const perStore = 8
	var wg sync.WaitGroup
	for i, s := range stores {
		for j := range perStore {
			wg.Go(func() {
				_, err := s.UpdateWorkPod(t.Context(), "shared", func(p *store.WorkPod) error {
					p.Reason += fmt.Sprintf("s%d.%d;", i, j)
					return nil
				})
				if err != nil {
					t.Errorf("update from store %d: %v", i, err)
				}
			})
		}
	}
	wg.Wait()
	got, err := stores[1].GetWorkPod(t.Context(), "shared")
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if n := strings.Count(got.Reason, ";"); n != 2*perStore {
		t.Errorf("%d appends recorded, want %d: %q", n, 2*perStore, got.Reason)
	}
}

// TestOpenSQLiteForms: every accepted spelling of an SQLite DSN reaches the
// same file, in WAL mode.
func TestOpenSQLiteForms(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "odd #?%name.db")
	uri := "file:" + filepath.Join(dir, "odd%20%23%3F%25name.db")
	t.Chdir(dir)
	forms := []string{
		path,
		"sqlite:" + path,
		"sqlite://" + path, // sqlite:///abs/path
		"sqlite:odd #?%name.db",
		"odd #?%name.db",
		uri + "?cache=private",
	}
	for i, dsn := range forms {
		s, err := store.Open(t.Context(), dsn)
		if err != nil {
			t.Fatalf("open %q: %v", dsn, err)
		}
		id := fmt.Sprintf("form%d", i)
		_, err = s.CreateWorkPod(t.Context(), store.WorkPod{ID: id, Cluster: "c", State: store.StatePending})
		if err != nil {
			t.Errorf("create via %q: %v", dsn, err)
		}
		got, err := s.ListWorkPods(t.Context(), store.Filter{})
		if err != nil || len(got) != i+1 {
			t.Errorf("via %q: %d rows, %v; want %d (not the same file?)", dsn, len(got), err, i+1)
		}
		s.Close()
	}
	var mode string
	if err := rawDB(t, "sqlite", uri).QueryRowContext(t.Context(), `PRAGMA journal_mode`).Scan(&mode); err != nil {
		t.Fatalf("journal_mode: %v", err)
	}
	if mode != "wal" {
		t.Errorf("journal_mode = %q, want wal", mode)
	}
}

func TestOpenErrors(t *testing.T) {
	tests := []struct {
		name, dsn string
		want      []string // substrings of the error
		forbidden string   // must not appear (a password)
	}{
		{"empty", "", []string{"empty path"}, ""},
		{"memory", ":memory:", []string{"in-memory"}, ""},
		{"memory uri", "file::memory:", []string{"in-memory"}, ""},
		{"memory mode", "file:x.db?mode=memory&cache=shared", []string{"in-memory"}, ""},
		{"missing directory", "/nonexistent-crucible-dir/state.db", []string{"/nonexistent-crucible-dir/state.db"}, ""},
		{"postgres password in userinfo", "postgres://crucible:s3cret@127.0.0.1:1/crucible?sslmode=disable&connect_timeout=2",
			[]string{"postgres://crucible:xxxxx@127.0.0.1:1/crucible"}, "s3cret"},
		{"postgresql password in query", "postgresql://crucible@127.0.0.1:1/crucible?password=s3cret&sslmode=disable&connect_timeout=2",
			[]string{"password=xxxxx"}, "s3cret"},
		{"postgres unparsable", "postgres://crucible:s3cret@127.0.0.1:notaport/db", []string{"open store"}, "s3cret"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := store.Open(t.Context(), tc.dsn)
			if err == nil {
				s.Close()
				t.Fatal("open: got nil error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if tc.forbidden != "" && strings.Contains(err.Error(), tc.forbidden) {
				t.Errorf("error %q leaks %q", err, tc.forbidden)
			}
		})
	}
}

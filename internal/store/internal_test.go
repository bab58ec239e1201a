package store

import (
	"database/sql"
	"path/filepath"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"

	"crucible.dev/crucible/internal/store/pgtest"
)

func TestStatePredicates(t *testing.T) {
	tests := []struct {
		s              State
		live, terminal bool
	}{
		{StatePending, true, false},
		{StateDispatched, true, false},
		{StateRunning, true, false},
		{StateSucceeded, false, true},
		{StateFailed, false, true},
		{StateCancelled, false, true},
		{StateLost, false, true},
		{"", false, false},
		{"Running", false, false},
	}
	for _, tc := range tests {
		if got := tc.s.Live(); got != tc.live {
			t.Errorf("%q.Live() = %v, want %v", tc.s, got, tc.live)
		}
		if got := tc.s.Terminal(); got != tc.terminal {
			t.Errorf("%q.Terminal() = %v, want %v", tc.s, got, tc.terminal)
		}
	}
}

func TestRebind(t *testing.T) {
	q := `SELECT a FROM t WHERE b = ? AND c IN (?, ?) LIMIT ?`
	if got, want := dialectPostgres.rebind(q), `SELECT a FROM t WHERE b = $1 AND c IN ($2, $3) LIMIT $4`; got != want {
		t.Errorf("postgres: %q, want %q", got, want)
	}
	if got := dialectSQLite.rebind(q); got != q {
		t.Errorf("sqlite: %q, want unchanged", got)
	}
}

func TestRedact(t *testing.T) {
	tests := []struct{ in, want string }{
		{"postgres://u:pw@h:5432/db?sslmode=disable", "postgres://u:xxxxx@h:5432/db?sslmode=disable"},
		{"postgresql://u@h/db?password=pw&sslmode=require", "postgresql://u@h/db?password=xxxxx&sslmode=require"},
		{"postgres://u@h/db", "postgres://u@h/db"},
		{"postgres://u:p%w#x@h/db", "postgres://u:xxxxx@h/db"},
		{"host=h user=u password=pw dbname=db", "host=h user=u password=xxxxx dbname=db"},
		{"/var/lib/crucible/state.db", "/var/lib/crucible/state.db"},
		{"sqlite:state.db", "sqlite:state.db"},
		{"file:state.db?password=pw", "file:state.db?password=xxxxx"},
	}
	for _, tc := range tests {
		if got := redact(tc.in); got != tc.want {
			t.Errorf("redact(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestSQLiteURI(t *testing.T) {
	tests := []struct{ dsn, base, query string }{
		{"/var/lib/c/state.db", "file:/var/lib/c/state.db", ""},
		{"state.db", "file:state.db", ""},
		{"sqlite:state.db", "file:state.db", ""},
		{"sqlite:///var/x.db", "file:/var/x.db", ""},
		{"sqlite:/var/x.db", "file:/var/x.db", ""},
		{"//tmp//a/../b.db", "file:/tmp/b.db", ""},
		{"/tmp/a?b#c%d.db", "file:/tmp/a%3Fb%23c%25d.db", ""},
		{"file:/tmp/x.db?cache=private&_pragma=cache_size(-4000)", "file:/tmp/x.db", "cache=private&_pragma=cache_size(-4000)"},
	}
	for _, tc := range tests {
		base, query, err := sqliteURI(tc.dsn)
		if err != nil || base != tc.base || query != tc.query {
			t.Errorf("sqliteURI(%q) = %q, %q, %v; want %q, %q", tc.dsn, base, query, err, tc.base, tc.query)
		}
	}
}

func TestLoadSteps(t *testing.T) {
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	tests := []struct {
		name    string
		fs      fstest.MapFS
		want    []step // for sqlite
		wantErr bool
	}{
		{name: "shared and per-dialect", fs: fstest.MapFS{
			"0001_init.sqlite.sql":   file("S1"),
			"0001_init.postgres.sql": file("P1"),
			"0002_more.sql":          file("X2"),
		}, want: []step{{1, "init", "S1"}, {2, "more", "X2"}}},
		{name: "gap", fs: fstest.MapFS{"0001_a.sql": file(""), "0003_c.sql": file("")}, wantErr: true},
		{name: "starts at 2", fs: fstest.MapFS{"0002_b.sql": file("")}, wantErr: true},
		{name: "shared and per-dialect for one version", fs: fstest.MapFS{
			"0001_a.sql": file(""), "0001_a.postgres.sql": file(""),
		}, wantErr: true},
		{name: "other dialect only", fs: fstest.MapFS{"0001_a.postgres.sql": file("")}, wantErr: true},
		{name: "names disagree", fs: fstest.MapFS{"0001_a.sqlite.sql": file(""), "0001_b.postgres.sql": file("")}, wantErr: true},
		{name: "bad file name", fs: fstest.MapFS{"0001_a.sql": file(""), "notes.txt": file("")}, wantErr: true},
		{name: "unknown dialect", fs: fstest.MapFS{"0001_a.mysql.sql": file("")}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := loadSteps(tc.fs, dialectSQLite)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(step{})); diff != "" {
				t.Errorf("steps (-want +got):\n%s", diff)
			}
		})
	}
	for _, d := range []dialect{dialectSQLite, dialectPostgres} {
		if steps, err := embeddedSteps(d); err != nil || len(steps) == 0 {
			t.Errorf("embedded %s steps: %d, %v", d, len(steps), err)
		}
	}
}

// TestMigrationFailureRollsBack: a failing step leaves the database at the
// previous version with none of the step's changes, and a fixed binary then
// applies it. Both backends have transactional DDL; this proves we use it.
func TestMigrationFailureRollsBack(t *testing.T) {
	backends := []struct {
		d    dialect
		open func(t *testing.T) *sql.DB
	}{
		{dialectSQLite, func(t *testing.T) *sql.DB {
			return openRaw(t, "sqlite", filepath.Join(t.TempDir(), "m.db")+"?_txlock=immediate")
		}},
		{dialectPostgres, func(t *testing.T) *sql.DB { return openRaw(t, "pgx", pgtest.NewDatabase(t)) }},
	}
	for _, b := range backends {
		t.Run(string(b.d), func(t *testing.T) {
			db := b.open(t)
			ctx := t.Context()
			broken := []step{
				{1, "a", `CREATE TABLE a (x INTEGER)`},
				{2, "b", `CREATE TABLE b (x INTEGER); INSERT INTO a (x) VALUES (1); CREATE TABLE broken (`},
			}
			if err := migrate(ctx, db, b.d, broken); err == nil {
				t.Fatal("migrate with a broken step: nil error")
			}
			if v := version(t, db); v != 1 {
				t.Errorf("version after failure = %d, want 1", v)
			}
			var n int
			if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM a`).Scan(&n); err != nil || n != 0 {
				t.Errorf("rows in a = %d, %v; want 0, nil (step 2 half applied)", n, err)
			}
			if _, err := db.ExecContext(ctx, `SELECT * FROM b`); err == nil {
				t.Error("table b exists after its step failed")
			}
			fixed := append(broken[:1:1], step{2, "b", `CREATE TABLE b (x INTEGER); INSERT INTO a (x) VALUES (1)`})
			if err := migrate(ctx, db, b.d, fixed); err != nil {
				t.Fatalf("migrate fixed: %v", err)
			}
			if v := version(t, db); v != 2 {
				t.Errorf("version = %d, want 2", v)
			}
			if err := migrate(ctx, db, b.d, fixed); err != nil {
				t.Fatalf("migrate again: %v", err)
			}
			if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM a`).Scan(&n); err != nil || n != 1 {
				t.Errorf("rows in a = %d, %v; want 1 (step applied twice?)", n, err)
			}
		})
	}
}

func openRaw(t *testing.T, driver, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func version(t *testing.T, db *sql.DB) int {
	t.Helper()
	var v int
	if err := db.QueryRowContext(t.Context(), `SELECT MAX(version) FROM schema_migrations`).Scan(&v); err != nil {
		t.Fatalf("version: %v", err)
	}
	return v
}

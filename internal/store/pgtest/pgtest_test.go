package pgtest

import (
	"database/sql"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

func query(t *testing.T, dsn, q string, dest ...any) {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatalf("open %s: %v", dsn, err)
	}
	defer db.Close()
	if err := db.QueryRowContext(t.Context(), q).Scan(dest...); err != nil {
		t.Fatalf("%s on %s: %v", q, dsn, err)
	}
}

// TestNewDatabase: each call gives a separate, empty database on a real
// PostgreSQL server.
func TestNewDatabase(t *testing.T) {
	a, b := NewDatabase(t), NewDatabase(t)
	if a == b {
		t.Fatalf("two calls returned the same DSN %s", a)
	}
	var version, db string
	query(t, a, `SELECT version(), current_database()`, &version, &db)
	if !strings.HasPrefix(version, "PostgreSQL ") || !strings.HasSuffix(a, "/"+db+"?sslmode=disable") {
		t.Errorf("version %q, database %q for %s", version, db, a)
	}
	var n int
	query(t, a, `SELECT COUNT(*) FROM pg_tables WHERE schemaname = 'public'`, &n)
	if n != 0 {
		t.Errorf("new database has %d tables", n)
	}
	if _, err := execSQL(t, a, `CREATE TABLE only_in_a (x int)`); err != nil {
		t.Fatal(err)
	}
	query(t, b, `SELECT COUNT(*) FROM pg_tables WHERE tablename = 'only_in_a'`, &n)
	if n != 0 {
		t.Error("a table created in one database is visible in another")
	}
}

func execSQL(t *testing.T, dsn, q string) (sql.Result, error) {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	return db.ExecContext(t.Context(), q)
}

// TestStartStop: a server of its own runs as a non-root user, and Stop ends
// exactly the process Start began and removes its directory.
func TestStartStop(t *testing.T) {
	if testing.Short() {
		t.Skip("PostgreSQL tests skipped in -short mode")
	}
	s, err := Start(t.Context())
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	pid, dir := s.cmd.Process.Pid, s.dir
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatalf("read process status: %v", err)
	}
	if os.Geteuid() == 0 && strings.Contains(uidLine(string(status)), "\t0\t") {
		t.Errorf("postgres runs as root: %s", uidLine(string(status)))
	}
	var one int
	query(t, s.DSN("postgres"), `SELECT 1`, &one)

	if err := s.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("directory %s left behind: %v", dir, err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("postgres %d still exists after Stop: %v", pid, err)
	}
	if err := s.Stop(); err != nil {
		t.Errorf("second stop: %v", err)
	}
}

func uidLine(status string) string {
	for _, l := range strings.Split(status, "\n") {
		if strings.HasPrefix(l, "Uid:") {
			return l + "\t"
		}
	}
	return ""
}

// TestHaltResume: a halted server refuses connections, and Resume brings the
// same data back on the same DSN with a new postmaster; the old one is gone.
func TestHaltResume(t *testing.T) {
	if testing.Short() {
		t.Skip("PostgreSQL tests skipped in -short mode")
	}
	s, err := Start(t.Context())
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	dsn := s.DSN("postgres")
	if _, err := execSQL(t, dsn, `CREATE TABLE kept (x int); INSERT INTO kept VALUES (41), (1)`); err != nil {
		t.Fatal(err)
	}
	pid := s.cmd.Process.Pid
	if err := s.Halt(); err != nil {
		t.Fatalf("halt: %v", err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("postgres %d still exists after Halt: %v", pid, err)
	}
	if _, err := execSQL(t, dsn, `SELECT 1`); err == nil {
		t.Error("a halted server answered a query")
	}
	if err := s.Resume(t.Context()); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if err := s.Resume(t.Context()); err == nil {
		t.Error("resume of a running server: no error")
	}
	if s.DSN("postgres") != dsn || s.cmd.Process.Pid == pid {
		t.Errorf("after resume: DSN %s (was %s), pid %d (was %d)", s.DSN("postgres"), dsn, s.cmd.Process.Pid, pid)
	}
	var sum int
	query(t, dsn, `SELECT SUM(x) FROM kept`, &sum)
	if sum != 42 {
		t.Errorf("after resume the table sums to %d, want 42", sum)
	}
}

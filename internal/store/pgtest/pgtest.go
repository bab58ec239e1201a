// Package pgtest starts throwaway PostgreSQL servers for tests, so that code
// written for the PostgreSQL store is tested against the real thing in the
// same `go test` run as SQLite (R-C2), on a developer machine and in CI alike.
//
// A test binary shares one server: its TestMain calls Main, and each test
// that needs a database calls NewDatabase, which starts the server on first
// use and creates a fresh, empty database for that test.
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
//
//	func TestThing(t *testing.T) {
//		dsn := pgtest.NewDatabase(t) // postgres://postgres@127.0.0.1:PORT/t_1?sslmode=disable
//		…
//	}
//
// The server runs from a temporary directory with fsync off, listens on a free
// loopback port and a unix socket in that directory, and is stopped (by the
// PID this package started) and removed when Main returns. Should the test
// binary die instead, the kernel kills the server with it (parent-death
// signal). PostgreSQL refuses to run as root; as root the server runs as the
// "postgres" OS user that the Debian package creates.
package pgtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
)

// InstallHint is what to do when the server binaries are missing.
const InstallHint = "install PostgreSQL: apt-get install postgresql (or run .ci/install-postgres.sh)"

// ErrNoBinaries: initdb and postgres were not found.
var ErrNoBinaries = errors.New("PostgreSQL server binaries (initdb, postgres) not found under /usr/lib/postgresql/*/bin or on PATH")

var shared struct {
	once  sync.Once
	srv   *Server
	err   error
	dbs   atomic.Int64
	admin *sql.DB
}

// Main runs the package's tests and then stops the shared server, if a test
// started one. Use it as `os.Exit(pgtest.Main(m))` in TestMain.
func Main(m *testing.M) int {
	code := m.Run()
	if err := stopShared(); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: stop server: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// NewDatabase returns the DSN of a new, empty database on the shared server.
// Under -short it skips the test. If the server cannot start (binaries
// missing, for one) it fails the test rather than skipping, so that a
// machine without PostgreSQL cannot pass the PostgreSQL half of the suite.
func NewDatabase(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("PostgreSQL tests skipped in -short mode")
	}
	srv, admin, err := sharedServer()
	if err != nil {
		if errors.Is(err, ErrNoBinaries) {
			t.Fatalf("PostgreSQL: %v; %s", err, InstallHint)
		}
		t.Fatalf("PostgreSQL: %v", err)
	}
	name := fmt.Sprintf("t_%d", shared.dbs.Add(1))
	// The name is ours (t_N), so quoting it is enough; CREATE DATABASE takes
	// no parameters.
	if _, err := admin.ExecContext(t.Context(), `CREATE DATABASE "`+name+`"`); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	return srv.DSN(name)
}

// sharedServer starts the shared server on first use.
func sharedServer() (*Server, *sql.DB, error) {
	shared.once.Do(func() {
		srv, err := Start(context.Background())
		if err != nil {
			shared.err = err
			return
		}
		admin, err := sql.Open("pgx", srv.DSN("postgres"))
		if err != nil {
			shared.err = errors.Join(err, srv.Stop())
			return
		}
		admin.SetMaxOpenConns(1)
		shared.srv, shared.admin = srv, admin
	})
	return shared.srv, shared.admin, shared.err
}

func stopShared() error {
	if shared.srv == nil {
		return nil
	}
	return errors.Join(shared.admin.Close(), shared.srv.Stop())
}

// binDir finds the directory holding initdb and postgres: the newest
// /usr/lib/postgresql/N/bin (Debian's layout, not on PATH), else PATH.
func binDir() (string, error) {
	dirs, _ := globVersions("/usr/lib/postgresql/*/bin/initdb")
	for _, initdb := range dirs {
		dir := initdb[:len(initdb)-len("/initdb")]
		if _, err := os.Stat(dir + "/postgres"); err == nil {
			return dir, nil
		}
	}
	initdb, err := exec.LookPath("initdb")
	if err != nil {
		return "", ErrNoBinaries
	}
	postgres, err := exec.LookPath("postgres")
	if err != nil {
		return "", ErrNoBinaries
	}
	if dirOf(initdb) != dirOf(postgres) {
		return "", fmt.Errorf("%w: initdb (%s) and postgres (%s) are in different directories", ErrNoBinaries, initdb, postgres)
	}
	return dirOf(initdb), nil
}

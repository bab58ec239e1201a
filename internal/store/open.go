package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers database/sql driver "pgx"
	_ "modernc.org/sqlite"             // registers database/sql driver "sqlite"
)

// dialect names the SQL backend; it picks per-dialect migration files and
// the placeholder syntax.
type dialect string

const (
	dialectSQLite   dialect = "sqlite"
	dialectPostgres dialect = "postgres"
)

// rebind turns the store's '?' placeholders into PostgreSQL's $1, $2, ….
// The store's own queries never contain '?' inside a literal, and values are
// always passed as parameters, never spliced into the text.
func (d dialect) rebind(q string) string {
	if d != dialectPostgres {
		return q
	}
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r != '?' {
			b.WriteRune(r)
			continue
		}
		n++
		b.WriteByte('$')
		b.WriteString(strconv.Itoa(n))
	}
	return b.String()
}

const (
	// sqliteBusyTimeout bounds how long a connection waits for another
	// process's write lock (a second controller on the same file, a backup).
	// Within one process writes queue on the single write connection instead.
	sqliteBusyTimeout = 10 * time.Second
	// sqliteReaders is the read pool size: WAL lets readers run beside the
	// writer, and API reads should not wait behind a reconcile.
	sqliteReaders = 4
	// walRetry spaces the attempts of a first open that lost the race to
	// put a fresh file in WAL mode; the winner holds it for milliseconds.
	walRetry = 20 * time.Millisecond
	// postgresConns caps the connections per replica; UpdateWorkPod holds one
	// for the length of its callback.
	postgresConns = 10
	openTimeout   = 30 * time.Second
)

// Open connects to the store named by dsn and migrates its schema.
//
//   - "postgres://…" or "postgresql://…": PostgreSQL (any libpq URL pgx accepts).
//   - "sqlite:PATH", or a plain PATH: an SQLite file at PATH, taken literally.
//   - "file:PATH[?query]": an SQLite URI; its query is kept and the store's
//     own settings are added.
//
// SQLite runs in WAL mode with a busy timeout and foreign keys on; all writes
// go through one connection (SQLite has one writer anyway, and queueing in
// the pool instead of in SQLite's lock avoids SQLITE_BUSY), reads through a
// small read-only pool. Errors name the DSN with any password redacted.
func Open(ctx context.Context, dsn string) (Store, error) {
	s, err := open(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", redact(dsn), err)
	}
	return s, nil
}

func open(ctx context.Context, dsn string) (*sqlStore, error) {
	ctx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	lower := strings.ToLower(dsn)
	if strings.HasPrefix(lower, "postgres://") || strings.HasPrefix(lower, "postgresql://") {
		return openPostgres(ctx, dsn)
	}
	return openSQLite(ctx, dsn)
}

func openPostgres(ctx context.Context, dsn string) (*sqlStore, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(postgresConns)
	db.SetMaxIdleConns(postgresConns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	s := &sqlStore{d: dialectPostgres, w: db, r: db}
	if err := s.init(ctx); err != nil {
		return nil, errors.Join(err, s.Close())
	}
	return s, nil
}

func openSQLite(ctx context.Context, dsn string) (*sqlStore, error) {
	base, query, err := sqliteURI(dsn)
	if err != nil {
		return nil, err
	}
	busy := "_pragma=busy_timeout(" + strconv.FormatInt(sqliteBusyTimeout.Milliseconds(), 10) + ")"
	// _txlock=immediate makes every transaction BEGIN IMMEDIATE: a
	// read-modify-write takes the write lock before it reads, so it can never
	// fail to upgrade a read lock half-way.
	writer := base + "?" + join(query, busy, "_pragma=synchronous(NORMAL)", "_pragma=foreign_keys(1)", "_txlock=immediate")
	reader := base + "?" + join(query, busy, "_pragma=foreign_keys(1)", "_pragma=query_only(1)")

	w, err := sql.Open("sqlite", writer)
	if err != nil {
		return nil, err
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	r, err := sql.Open("sqlite", reader)
	if err != nil {
		return nil, errors.Join(err, w.Close())
	}
	r.SetMaxOpenConns(sqliteReaders)
	r.SetMaxIdleConns(sqliteReaders)
	s := &sqlStore{d: dialectSQLite, w: w, r: r}
	// The file is in WAL mode before init migrates it and before r opens a
	// connection, so readers never see it in any other mode.
	if err := enterWAL(ctx, w); err != nil {
		return nil, errors.Join(err, s.Close())
	}
	if err := s.init(ctx); err != nil {
		return nil, errors.Join(err, s.Close())
	}
	if err := r.PingContext(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("connect reader: %w", err), s.Close())
	}
	return s, nil
}

// enterWAL switches the file to WAL mode, which then stays with the file.
// It is a statement of its own, not a connection parameter, because it must
// be retried: when several processes open a fresh file at once, each reads
// it and then needs it exclusively to change its journal mode, and SQLite
// answers all but one SQLITE_BUSY at once rather than let them wait on each
// other past the busy timeout (a deadlock). The loser tries again once the
// winner is done, until ctx (the open timeout) ends.
func enterWAL(ctx context.Context, w *sql.DB) error {
	for {
		var mode string
		err := w.QueryRowContext(ctx, "PRAGMA journal_mode=WAL").Scan(&mode)
		switch {
		case err == nil && strings.EqualFold(mode, "wal"):
			return nil
		case err == nil:
			return fmt.Errorf("connect: journal mode stays %q, WAL is needed", mode)
		case !isBusy(err):
			return fmt.Errorf("connect: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("connect: %w (and %w)", err, context.Cause(ctx))
		case <-time.After(walRetry):
		}
	}
}

// init checks the connection and applies the migrations.
func (s *sqlStore) init(ctx context.Context) error {
	if err := s.w.PingContext(ctx); err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	steps, err := embeddedSteps(s.d)
	if err != nil {
		return err
	}
	return migrate(ctx, s.w, s.d, steps)
}

// sqliteURI turns an SQLite DSN into a "file:" URI without query, plus the
// caller's query (if it gave a file: URI). In-memory databases are refused:
// the reader and writer pools would each get their own empty database.
func sqliteURI(dsn string) (base, query string, err error) {
	var path string
	switch {
	case strings.HasPrefix(dsn, "file:"):
		base, query, _ = strings.Cut(dsn, "?")
		if base == "file:" || base == "file::memory:" || strings.Contains(query, "mode=memory") {
			return "", "", errors.New("sqlite: in-memory databases are not supported, give a file path")
		}
		return base, query, nil
	case strings.HasPrefix(dsn, "sqlite:"):
		path = strings.TrimPrefix(dsn, "sqlite:")
		path = strings.TrimPrefix(path, "//") // sqlite:///abs/path, sqlite://rel/path
	default:
		path = dsn
	}
	switch path {
	case "":
		return "", "", errors.New("sqlite: empty path")
	case ":memory:":
		return "", "", errors.New("sqlite: in-memory databases are not supported, give a file path")
	}
	// A literal path becomes a URI path: escape what a URI would read as
	// an escape, a query or a fragment.
	escaped := strings.NewReplacer("%", "%25", "?", "%3F", "#", "%23").Replace(filepath.Clean(path))
	return "file:" + escaped, "", nil
}

// join appends the store's parameters to the caller's query.
func join(query string, params ...string) string {
	if query != "" {
		params = append([]string{query}, params...)
	}
	return strings.Join(params, "&")
}

var (
	kvPassword       = regexp.MustCompile(`(?i)(password=)[^&\s]*`)
	userinfoPassword = regexp.MustCompile(`(://[^:/@]*):[^@]*@`)
)

// redact returns dsn with any password replaced, for error messages.
func redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" || u.Opaque != "" {
		return kvPassword.ReplaceAllString(userinfoPassword.ReplaceAllString(dsn, "$1:xxxxx@"), "${1}xxxxx")
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	if q := u.Query(); q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.String()
}

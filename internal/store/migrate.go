package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"strconv"
	"time"
)

// migrationFiles holds the schema steps. A step is NNNN_name.sql when one
// file serves both dialects, or NNNN_name.sqlite.sql plus
// NNNN_name.postgres.sql when the dialects need different SQL.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// step is one numbered migration as it applies to one dialect.
type step struct {
	version int
	name    string
	sql     string
}

var migrationName = regexp.MustCompile(`^(\d{4})_([a-z0-9_]+?)(?:\.(sqlite|postgres))?\.sql$`)

// loadSteps reads the steps for dialect d from fsys (files at its root),
// ordered by version. Versions must run 1..N without gaps, and each must
// resolve to exactly one file for d, so that a missing or doubled file is a
// build-time test failure rather than a half-migrated production database.
func loadSteps(fsys fs.FS, d dialect) ([]step, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	type candidates struct {
		name          string
		neutral, forD string // file names
		forOther      bool
	}
	byVersion := map[int]*candidates{}
	for _, e := range entries {
		m := migrationName.FindStringSubmatch(e.Name())
		if m == nil || e.IsDir() {
			return nil, fmt.Errorf("migration %s: name is not NNNN_name[.sqlite|.postgres].sql", e.Name())
		}
		v, _ := strconv.Atoi(m[1])
		c := byVersion[v]
		if c == nil {
			c = &candidates{name: m[2]}
			byVersion[v] = c
		}
		if c.name != m[2] {
			return nil, fmt.Errorf("migration %04d: files disagree on its name (%s, %s)", v, c.name, m[2])
		}
		switch m[3] {
		case "":
			c.neutral = e.Name()
		case string(d):
			c.forD = e.Name()
		default:
			c.forOther = true
		}
	}
	steps := make([]step, 0, len(byVersion))
	for v := 1; v <= len(byVersion); v++ {
		c, ok := byVersion[v]
		if !ok {
			return nil, fmt.Errorf("migration %04d is missing", v)
		}
		file := c.neutral
		switch {
		case c.neutral != "" && (c.forD != "" || c.forOther):
			return nil, fmt.Errorf("migration %04d has both a shared and a per-dialect file", v)
		case c.neutral == "" && c.forD == "":
			return nil, fmt.Errorf("migration %04d has no file for %s", v, d)
		case c.forD != "":
			file = c.forD
		}
		body, err := fs.ReadFile(fsys, file)
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", file, err)
		}
		steps = append(steps, step{version: v, name: c.name, sql: string(body)})
	}
	return steps, nil
}

// embeddedSteps returns the binary's own migrations for d.
func embeddedSteps(d dialect) ([]step, error) {
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	steps, err := loadSteps(sub, d)
	if err == nil && len(steps) == 0 {
		err = errNoSteps
	}
	return steps, err
}

// migrationLockKey is the PostgreSQL advisory lock that serialises replicas
// migrating the same database at the same time (an arbitrary constant).
const migrationLockKey = 0x63727563 // "cruc"

const createSchemaMigrations = `CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INTEGER NOT NULL PRIMARY KEY,
    name       TEXT    NOT NULL,
    applied_at BIGINT  NOT NULL
)`

// migrate applies every step the database has not seen yet, each in its own
// transaction together with its schema_migrations row, so a failed step
// leaves the database at the previous version. Applying twice is a no-op.
func migrate(ctx context.Context, db *sql.DB, d dialect, steps []step) error {
	for {
		applied, err := migrateOne(ctx, db, d, steps)
		if err != nil {
			return err
		}
		if !applied {
			return nil
		}
	}
}

// migrateOne applies the next pending step, if any. The version is read
// inside the same transaction that applies the step, under a lock (advisory
// lock on PostgreSQL, BEGIN IMMEDIATE on SQLite), so two processes migrating
// at once apply each step exactly once.
func migrateOne(ctx context.Context, db *sql.DB, d dialect, steps []step) (applied bool, err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("begin migration: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if d == dialectPostgres {
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLockKey); err != nil {
			return false, fmt.Errorf("lock migrations: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, createSchemaMigrations); err != nil {
		return false, fmt.Errorf("create schema_migrations: %w", err)
	}
	var current sql.NullInt64
	if err := tx.QueryRowContext(ctx, `SELECT MAX(version) FROM schema_migrations`).Scan(&current); err != nil {
		return false, fmt.Errorf("read schema version: %w", err)
	}
	have, known := int(current.Int64), len(steps)
	if have > known {
		return false, fmt.Errorf("%w: database is at version %d, this binary knows up to %d", ErrSchemaTooNew, have, known)
	}
	if have == known {
		return false, tx.Commit()
	}
	next := steps[have]
	if _, err := tx.ExecContext(ctx, next.sql); err != nil {
		return false, fmt.Errorf("apply migration %04d_%s: %w", next.version, next.name, err)
	}
	if _, err := tx.ExecContext(ctx, d.rebind(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`),
		next.version, next.name, time.Now().UnixNano()); err != nil {
		return false, fmt.Errorf("record migration %04d_%s: %w", next.version, next.name, err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("commit migration %04d_%s: %w", next.version, next.name, err)
	}
	return true, nil
}

// errNoSteps guards against an empty embed (a build mistake).
var errNoSteps = errors.New("no migrations embedded")

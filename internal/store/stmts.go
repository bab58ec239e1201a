package store

import (
	"context"
	"database/sql"
	"errors"
	"sync"
)

// stmts keeps the prepared form of the store's hot statements (a row by id,
// an insert, a transition, an observation, an artifact lookup). Neither
// driver keeps one on its own for SQLite: modernc.org/sqlite parses the SQL
// of every call again, which was an eighth of the controller's CPU while
// dispatching. A *sql.Stmt is prepared on each pooled connection as it is
// first used there and again on a new one after a lost connection
// (database/sql does both).
type stmts struct {
	mu sync.Mutex
	m  map[stmtKey]*sql.Stmt
}

type stmtKey struct {
	db    *sql.DB
	query string
}

// get returns query prepared on db, preparing it on first use. A failed
// prepare is returned and not kept (the next call tries again).
func (c *stmts) get(ctx context.Context, db *sql.DB, query string) (*sql.Stmt, error) {
	k := stmtKey{db, query}
	c.mu.Lock()
	st, ok := c.m[k]
	c.mu.Unlock()
	if ok {
		return st, nil
	}
	st, err := db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if have, ok := c.m[k]; ok { // another caller prepared it meanwhile
		_ = st.Close()
		return have, nil
	}
	if c.m == nil {
		c.m = map[stmtKey]*sql.Stmt{}
	}
	c.m[k] = st
	return st, nil
}

// close closes every prepared statement.
func (c *stmts) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, st := range c.m {
		errs = append(errs, st.Close())
	}
	c.m = nil
	return errors.Join(errs...)
}

// prepareWrite returns queries (already rebound) prepared on the write pool,
// for a write transaction to run through tx.StmtContext, which reuses the
// form prepared on the transaction's connection. Call it before the
// transaction begins: on SQLite the transaction holds the only write
// connection, which a prepare inside it would wait for.
func (s *sqlStore) prepareWrite(ctx context.Context, queries ...string) ([]*sql.Stmt, error) {
	sts := make([]*sql.Stmt, len(queries))
	for i, q := range queries {
		st, err := s.stmts.get(ctx, s.w, q)
		if err != nil {
			return nil, err
		}
		sts[i] = st
	}
	return sts, nil
}

// queryRow runs query (already rebound) on db as a prepared statement.
func (s *sqlStore) queryRow(ctx context.Context, db *sql.DB, query string, args ...any) scanner {
	st, err := s.stmts.get(ctx, db, query)
	if err != nil {
		return errScanner{err}
	}
	return st.QueryRowContext(ctx, args...)
}

// query runs query (already rebound) on db as a prepared statement.
func (s *sqlStore) query(ctx context.Context, db *sql.DB, query string, args ...any) (*sql.Rows, error) {
	st, err := s.stmts.get(ctx, db, query)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

// errScanner is a row whose statement could not be prepared.
type errScanner struct{ err error }

func (e errScanner) Scan(...any) error { return e.err }

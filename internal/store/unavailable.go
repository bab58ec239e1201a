package store

import (
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// IsUnavailable reports whether err says the database could not serve the
// request right now — a connection refused or cut, a server shutting down,
// restarting or recovering, too many connections, a lock held past the busy
// timeout — rather than anything about the data. Such an error is
// transient: callers retry it or answer 503 with Retry-After, never a 500 or
// a verdict on the request (SPEC R-C4's classification, for the store).
func IsUnavailable(err error) bool {
	if err == nil || errors.Is(err, ErrNotFound) || errors.Is(err, ErrConflict) || errors.Is(err, ErrKeyTaken) ||
		errors.Is(err, ErrImmutable) || errors.Is(err, ErrQuota) || errors.Is(err, ErrFull) || errors.Is(err, ErrFenced) {
		return false
	}
	if pg, ok := errors.AsType[*pgconn.PgError](err); ok {
		return pgUnavailable(pg.Code)
	}
	if _, ok := errors.AsType[*sqlite.Error](err); ok {
		return isBusy(err)
	}
	if _, ok := errors.AsType[*pgconn.ConnectError](err); ok {
		return true
	}
	if _, ok := errors.AsType[net.Error](err); ok {
		return true
	}
	return pgconn.Timeout(err) || errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// pgUnavailable: connection exceptions (class 08), insufficient resources
// (class 53: too many connections, out of memory or disk), and an operator
// or crash shutdown or a server still starting (57P01–57P03).
func pgUnavailable(code string) bool {
	switch {
	case strings.HasPrefix(code, "08"), strings.HasPrefix(code, "53"):
		return true
	case code == "57P01", code == "57P02", code == "57P03":
		return true
	}
	return false
}

// isBusy reports whether err is SQLite's "another connection holds the lock".
func isBusy(err error) bool {
	se, ok := errors.AsType[*sqlite.Error](err)
	if !ok {
		return false
	}
	switch se.Code() & 0xff { // the primary code; extended codes add high bits
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		return true
	}
	return false
}

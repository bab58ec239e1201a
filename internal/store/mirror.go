package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// MirrorDocumentNames are the documents the discovery mirror keeps
// (migration 0011 allows no others).
var MirrorDocumentNames = []string{"discovery", "jwks"}

// MaxMirrorDocumentBytes bounds a kept document, as the mirror bounds what
// it reads from the hub API.
const MaxMirrorDocumentBytes = 256 << 10

// keepMirrorSQL keeps the newer of two fetches: a replica whose fetch is
// older than the one kept leaves it.
const keepMirrorSQL = `INSERT INTO mirror_documents (name, body, fetched_at) VALUES (?, ?, ?)
	ON CONFLICT (name) DO UPDATE SET body = excluded.body, fetched_at = excluded.fetched_at
	WHERE mirror_documents.fetched_at < excluded.fetched_at`

// KeepMirrorDocument keeps body, the mirror's document name as the hub API
// sent it at fetchedAt, unless a newer fetch is kept already.
func (s *sqlStore) KeepMirrorDocument(ctx context.Context, name string, body []byte, fetchedAt time.Time) error {
	if err := checkMirrorDocument(name, body); err != nil {
		return fmt.Errorf("keep mirror document: %w", err)
	}
	at, err := toNanos(fetchedAt)
	if err != nil {
		return fmt.Errorf("keep mirror document %s: fetched at: %w", name, err)
	}
	if _, err := s.w.ExecContext(ctx, s.d.rebind(keepMirrorSQL), name, body, at); err != nil {
		return fmt.Errorf("keep mirror document %s: %w", name, err)
	}
	return nil
}

// MirrorDocument is the kept document name and when it was fetched;
// ErrNotFound when none is kept.
func (s *sqlStore) MirrorDocument(ctx context.Context, name string) ([]byte, time.Time, error) {
	var (
		body []byte
		at   int64
	)
	err := s.queryRow(ctx, s.r, s.d.rebind(`SELECT body, fetched_at FROM mirror_documents WHERE name = ?`), name).Scan(&body, &at)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, time.Time{}, fmt.Errorf("mirror document %s: %w", name, ErrNotFound)
	case err != nil:
		return nil, time.Time{}, fmt.Errorf("mirror document %s: %w", name, err)
	}
	return body, fromNanos(at), nil
}

func checkMirrorDocument(name string, body []byte) error {
	switch {
	case name != "discovery" && name != "jwks":
		return fmt.Errorf("unknown document %q (want discovery or jwks)", name)
	case len(body) == 0:
		return fmt.Errorf("%s: empty body", name)
	case len(body) > MaxMirrorDocumentBytes:
		return fmt.Errorf("%s: %d bytes, more than %d", name, len(body), MaxMirrorDocumentBytes)
	}
	return nil
}

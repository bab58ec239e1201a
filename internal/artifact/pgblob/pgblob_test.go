package pgblob_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"strings"
	"testing"
	"time"

	"crucible.dev/crucible/internal/artifact/blobtest"
	"crucible.dev/crucible/internal/artifact/pgblob"
	"crucible.dev/crucible/internal/store"
	"crucible.dev/crucible/internal/store/pgtest"
)

// TestMain shares one throwaway PostgreSQL server among the package's tests.
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// migrated returns the DSN of a fresh database with the store's schema.
func migrated(t *testing.T) string {
	t.Helper()
	dsn := pgtest.NewDatabase(t)
	st, err := store.Open(t.Context(), dsn)
	if err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	return dsn
}

func open(t *testing.T, dsn string) *pgblob.Blobs {
	t.Helper()
	b, err := pgblob.Open(t.Context(), dsn)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func TestConformance(t *testing.T) {
	blobtest.Run(t, func(t *testing.T) blobtest.Blobs { return open(t, migrated(t)) })
}

// TestReplicasShareBytes: what one replica commits, another reads, and a
// second replica's commit of the same bytes leaves one blob.
func TestReplicasShareBytes(t *testing.T) {
	dsn := migrated(t)
	a, b := open(t, dsn), open(t, dsn)
	content := strings.Repeat("0123456789abcdef", 100_000) // 1.6 MB: two chunks
	w, err := a.Write(t.Context(), "wp-1", "result", strings.NewReader(content), 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Write(t.Context(), "wp-1", "result", strings.NewReader(content), 4<<20); err != nil {
		t.Fatal(err)
	}
	rc, err := b.Open(t.Context(), "wp-1", "result", w.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	h := sha256.New()
	if _, err := io.Copy(h, rc); err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != w.SHA256 {
		t.Errorf("replica b read sha256 %s, replica a wrote %s", got, w.SHA256)
	}
	if n := count(t, dsn, `SELECT count(*) FROM artifact_blobs`); n != 1 {
		t.Errorf("%d blobs after two commits of the same bytes, want 1", n)
	}
	if n := count(t, dsn, `SELECT count(*) FROM artifact_chunks`); n != 2 {
		t.Errorf("%d chunks, want 2", n)
	}
}

// TestRemoveStale drops only staged blobs older than the age: a crash's
// leftovers, never a live upload or committed content.
func TestRemoveStale(t *testing.T) {
	dsn := migrated(t)
	b := open(t, dsn)
	kept, err := b.Write(t.Context(), "wp-1", "result", strings.NewReader("kept"), 10)
	if err != nil {
		t.Fatal(err)
	}
	live, err := b.Stage(t.Context(), "wp-1", "live", strings.NewReader("live"), 10)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Discard()
	raw := rawDB(t, dsn)
	// A crash's leftover: staged an hour ago, never committed.
	if _, err := raw.ExecContext(t.Context(), `INSERT INTO artifact_blobs (pod_id, kind, touched_at) VALUES ('wp-1', 'crashed', $1)`,
		time.Now().Add(-time.Hour).UnixNano()); err != nil {
		t.Fatal(err)
	}
	n, err := b.RemoveStale(t.Context(), 10*time.Minute)
	if err != nil || n != 1 {
		t.Fatalf("RemoveStale = %d, %v; want 1, nil", n, err)
	}
	if err := live.Commit(t.Context()); err != nil {
		t.Errorf("the live upload's commit after RemoveStale: %v", err)
	}
	rc, err := b.Open(t.Context(), "wp-1", "result", kept.SHA256)
	if err != nil {
		t.Fatalf("committed content after RemoveStale: %v", err)
	}
	rc.Close()
}

// TestMissingChunk: a blob whose chunks are gone reads as an error, never
// as short content that looks whole.
func TestMissingChunk(t *testing.T) {
	dsn := migrated(t)
	b := open(t, dsn)
	content := strings.Repeat("z", 1<<20+10)
	w, err := b.Write(t.Context(), "wp-1", "result", strings.NewReader(content), 2<<20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rawDB(t, dsn).ExecContext(t.Context(), `DELETE FROM artifact_chunks WHERE seq = 1`); err != nil {
		t.Fatal(err)
	}
	rc, err := b.Open(t.Context(), "wp-1", "result", w.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := io.ReadAll(rc); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("reading a blob with a missing chunk: %v, want io.ErrUnexpectedEOF", err)
	}
}

// TestUnmigrated: a database without the tables fails loudly at first use.
func TestUnmigrated(t *testing.T) {
	b := open(t, pgtest.NewDatabase(t))
	if _, err := b.Stage(t.Context(), "wp-1", "result", strings.NewReader("x"), 10); err == nil {
		t.Error("Stage on an unmigrated database succeeded")
	}
	if _, err := b.Open(t.Context(), "wp-1", "result", strings.Repeat("a", 64)); err == nil || errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Open on an unmigrated database: %v, want a database error", err)
	}
}

func TestOpenUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := pgblob.Open(ctx, "postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=2"); err == nil {
		t.Error("Open of an unreachable server succeeded")
	}
}

func rawDB(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func count(t *testing.T, dsn, q string) int {
	t.Helper()
	var n int
	if err := rawDB(t, dsn).QueryRowContext(t.Context(), q).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Package pgblob keeps artifact bytes in PostgreSQL, so that every replica
// of an HA controller (R-C10) serves every artifact, whichever replica
// stored it. It has the methods of artifact.Dir (stage, commit, open,
// remove) with the same content addressing, over the tables of store
// migration 0004: a blob row per staged or committed content, its bytes in
// chunks of ChunkSize.
//
// Nothing here holds a whole artifact in memory: staging reads and inserts
// one chunk at a time, each in its own statement (a slow upload holds no
// transaction open), and a reader fetches one chunk per Read that needs one.
// Committing sets the blob's sha256, which publishes it under its address
// without copying a byte; a second commit of the same address (the same
// bytes, from another upload or replica) finds it taken and drops its own
// copy. Which blob is the artifact is the store's artifacts row, as with
// files: a blob is only ever read by the digest a row records.
package pgblob

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"crucible.dev/crucible/internal/artifact"
)

// ChunkSize is the largest chunk: big enough that a 1 GiB artifact is a
// thousand rows, small enough that a chunk in flight costs nothing.
const ChunkSize = 1 << 20

// cleanupTimeout bounds a Discard's or a failed stage's delete, which runs
// when the request's context may already be gone.
const cleanupTimeout = 30 * time.Second

// maxConns caps this package's own connections per replica; uploads and
// downloads each hold one only for a statement at a time.
const maxConns = 8

// Blobs stores artifact bytes in PostgreSQL. Safe for concurrent use.
type Blobs struct {
	db  *sql.DB
	now func() time.Time
}

// Open connects to the PostgreSQL database dsn, whose schema store.Open has
// migrated (the tables are the store's migration 0004).
func Open(ctx context.Context, dsn string) (*Blobs, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, fmt.Errorf("open artifact blobs: %w", err)
	}
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	if err := db.PingContext(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("connect artifact blobs: %w", err), db.Close())
	}
	return &Blobs{db: db, now: time.Now}, nil
}

// Close closes the connections.
func (b *Blobs) Close() error { return b.db.Close() }

func (b *Blobs) stamp() int64 { return b.now().UTC().UnixNano() }

func checkNames(podID, kind string) error {
	if !artifact.ValidName(podID) || !artifact.ValidName(kind) {
		return fmt.Errorf("%w: pod %q kind %q", artifact.ErrInvalidName, podID, kind)
	}
	return nil
}

func checkAddress(podID, kind, digest string) error {
	if err := checkNames(podID, kind); err != nil {
		return err
	}
	if !artifact.ValidDigest(digest) {
		return fmt.Errorf("%w: digest %q", artifact.ErrInvalidName, digest)
	}
	return nil
}

// Write stages r (at most limit bytes) and commits it under its digest.
func (b *Blobs) Write(ctx context.Context, podID, kind string, r io.Reader, limit int64) (artifact.Written, error) {
	s, err := b.Stage(ctx, podID, kind, r, limit)
	if err != nil {
		return artifact.Written{}, err
	}
	defer s.Discard()
	if err := s.Commit(ctx); err != nil {
		return artifact.Written{}, err
	}
	return s.Written(), nil
}

// Stage writes r (at most limit bytes) as a new staged blob, chunk by
// chunk, and hashes it. More than limit bytes is artifact.ErrTooLarge; on
// any error the staged rows are deleted.
func (b *Blobs) Stage(ctx context.Context, podID, kind string, r io.Reader, limit int64) (artifact.Staged, error) {
	if err := checkNames(podID, kind); err != nil {
		return nil, err
	}
	var id int64
	err := b.db.QueryRowContext(ctx, `INSERT INTO artifact_blobs (pod_id, kind, touched_at) VALUES ($1, $2, $3) RETURNING id`,
		podID, kind, b.stamp()).Scan(&id)
	if err != nil {
		return nil, fmt.Errorf("stage artifact %s/%s: %w", podID, kind, err)
	}
	w, err := b.fill(ctx, id, r, limit)
	if err != nil {
		b.drop(id)
		return nil, err
	}
	return &staged{b: b, id: id, podID: podID, kind: kind, written: w}, nil
}

// fill copies r into blob id's chunks.
func (b *Blobs) fill(ctx context.Context, id int64, r io.Reader, limit int64) (artifact.Written, error) {
	h := sha256.New()
	buf := make([]byte, ChunkSize)
	lr := io.LimitReader(r, limit+1)
	var n int64
	for seq := 0; ; seq++ {
		k, err := io.ReadFull(lr, buf)
		if k > 0 {
			n += int64(k)
			if n > limit {
				return artifact.Written{}, fmt.Errorf("%w: more than %d bytes", artifact.ErrTooLarge, limit)
			}
			h.Write(buf[:k])
			if err := b.chunk(ctx, id, seq, buf[:k]); err != nil {
				return artifact.Written{}, err
			}
		}
		switch {
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			return artifact.Written{Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
		case err != nil:
			return artifact.Written{}, fmt.Errorf("read artifact: %w", err)
		}
	}
}

// chunk inserts one chunk and marks the blob alive, in one statement.
func (b *Blobs) chunk(ctx context.Context, id int64, seq int, data []byte) error {
	_, err := b.db.ExecContext(ctx, `WITH c AS (INSERT INTO artifact_chunks (blob_id, seq, data) VALUES ($1, $2, $3))
		UPDATE artifact_blobs SET touched_at = $4, size = size + $5 WHERE id = $1`, id, seq, data, b.stamp(), len(data))
	if err != nil {
		return fmt.Errorf("write artifact chunk: %w", err)
	}
	return nil
}

// drop deletes blob id and its chunks, best effort, with a context of its
// own: it cleans up after a request that may have ended.
func (b *Blobs) drop(id int64) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_, _ = b.db.ExecContext(ctx, `DELETE FROM artifact_blobs WHERE id = $1`, id)
}

// staged is a Blobs' artifact.Staged: a blob row without sha256.
type staged struct {
	b           *Blobs
	id          int64
	podID, kind string
	written     artifact.Written
	done        bool
}

func (s *staged) Written() artifact.Written { return s.written }

// Commit publishes the blob under (pod, kind, sha256). If that address is
// taken (the same bytes, committed by another writer) the staged copy is
// dropped and the one there stands.
func (s *staged) Commit(ctx context.Context) error {
	if s.done {
		return artifact.ErrDone
	}
	s.done = true
	res, err := s.b.db.ExecContext(ctx, `UPDATE artifact_blobs SET sha256 = $1, touched_at = $2 WHERE id = $3 AND sha256 IS NULL`,
		s.written.SHA256, s.b.stamp(), s.id)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "23505": // unique_violation: the address holds these bytes already
		s.b.drop(s.id)
		return nil
	case err != nil:
		s.b.drop(s.id)
		return fmt.Errorf("commit artifact: %w", err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		return fmt.Errorf("commit artifact %s/%s: staged blob vanished (removed as stale)", s.podID, s.kind)
	}
	return nil
}

// Discard drops the staged blob; after Commit or Discard it does nothing.
func (s *staged) Discard() {
	if s.done {
		return
	}
	s.done = true
	s.b.drop(s.id)
}

// Remove deletes the committed blob of (podID, kind, digest). Callers use it
// only for content the store did not record (a lost claim); a missing blob
// is not an error.
func (b *Blobs) Remove(ctx context.Context, podID, kind, digest string) error {
	if err := checkAddress(podID, kind, digest); err != nil {
		return err
	}
	if _, err := b.db.ExecContext(ctx, `DELETE FROM artifact_blobs WHERE pod_id = $1 AND kind = $2 AND sha256 = $3`, podID, kind, digest); err != nil {
		return fmt.Errorf("remove artifact: %w", err)
	}
	return nil
}

// RemoveStale deletes staged blobs untouched for longer than age: what a
// crashed replica left mid-upload. A live upload touches its blob with every
// chunk, so an age well above a chunk's time at the minimum upload rate
// never takes one, whichever replica runs it.
func (b *Blobs) RemoveStale(ctx context.Context, age time.Duration) (int64, error) {
	res, err := b.db.ExecContext(ctx, `DELETE FROM artifact_blobs WHERE sha256 IS NULL AND touched_at < $1`, b.now().Add(-age).UTC().UnixNano())
	if err != nil {
		return 0, fmt.Errorf("remove stale artifact blobs: %w", err)
	}
	n, _ := res.RowsAffected()
	return n, nil
}

// Open returns a reader of the committed content (podID, kind, digest),
// which fetches one chunk at a time under ctx. Missing content is an error
// that wraps fs.ErrNotExist.
func (b *Blobs) Open(ctx context.Context, podID, kind, digest string) (io.ReadCloser, error) {
	if err := checkAddress(podID, kind, digest); err != nil {
		return nil, err
	}
	var id, size int64
	err := b.db.QueryRowContext(ctx, `SELECT id, size FROM artifact_blobs WHERE pod_id = $1 AND kind = $2 AND sha256 = $3`,
		podID, kind, digest).Scan(&id, &size)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("open artifact %s/%s: %w", podID, kind, fs.ErrNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("open artifact %s/%s: %w", podID, kind, err)
	}
	return &reader{ctx: ctx, db: b.db, id: id, left: size}, nil
}

// reader streams a blob's chunks in order.
type reader struct {
	ctx  context.Context
	db   *sql.DB
	id   int64
	seq  int
	left int64  // bytes not yet returned
	buf  []byte // the unread rest of the current chunk
	arr  []byte // buf's array, reused for every chunk
}

func (r *reader) Read(p []byte) (int, error) {
	if len(r.buf) == 0 {
		if r.left == 0 {
			return 0, io.EOF
		}
		if err := r.next(); err != nil {
			return 0, err
		}
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	r.left -= int64(n)
	return n, nil
}

// next fetches the next chunk into buf, reusing one array for every
// chunk: the driver's bytes are copied out of its row buffer, so reading
// an artifact allocates one chunk's worth, not the artifact's.
func (r *reader) next() error {
	rows, err := r.db.QueryContext(r.ctx, `SELECT data FROM artifact_chunks WHERE blob_id = $1 AND seq = $2`, r.id, r.seq)
	if err != nil {
		return fmt.Errorf("read artifact chunk: %w", err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read artifact chunk: %w", err)
		}
		return fmt.Errorf("artifact chunk %d missing: %w", r.seq, io.ErrUnexpectedEOF)
	}
	var data sql.RawBytes
	if err := rows.Scan(&data); err != nil {
		return fmt.Errorf("read artifact chunk: %w", err)
	}
	if len(data) == 0 || int64(len(data)) > r.left {
		return fmt.Errorf("artifact chunk %d has %d bytes, %d left: %w", r.seq, len(data), r.left, io.ErrUnexpectedEOF)
	}
	if cap(r.arr) < len(data) {
		r.arr = make([]byte, len(data))
	}
	r.buf = r.arr[:copy(r.arr[:len(data)], data)]
	r.seq++
	return rows.Close()
}

func (r *reader) Close() error {
	r.buf, r.arr, r.left = nil, nil, 0
	return nil
}

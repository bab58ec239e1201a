// Package artifact owns the artifact files on disk.
//
// Files are content-addressed: the bytes of artifact (pod, kind) with
// digest D live at <root>/<pod>/<kind>.<D>, D the lowercase hex sha256
// (kinds are DNS labels, which have no dot, so the name is unambiguous).
// A name therefore only ever holds one content: committing never changes
// the bytes behind a name, two writers of different bytes (in one process
// or on two replicas sharing the directory) end in two different files,
// and a reader that opens the file named by the digest the store recorded
// gets exactly those bytes. Which file is the artifact is decided by the
// store's record, not here: this package writes and opens files, the
// store's row is the claim.
//
// Content is staged in a temp file next to its final name
// (<root>/<pod>/.<kind>.tmp-*), synced and hashed, then renamed into place
// and the directory synced, so a reader never sees half an artifact. A
// crash leaves at most temp files, which CleanTemp removes at start.
//
// Files written before content addressing (<root>/<pod>/<kind>) are still
// served by Open for their records.
//
// Dir is where artifact bytes live with the SQLite store, on one machine.
// With PostgreSQL they live in the database (package pgblob), so that every
// replica reads them; both have the same methods, and the users (the
// drop-box, the API, log collection) each name the few they need in an
// interface of their own. Staged and Written are the vocabulary both share.
package artifact

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// ErrTooLarge is returned when content exceeds the limit; nothing is written.
var ErrTooLarge = errors.New("artifact too large")

// ErrInvalidName is returned for a pod id or kind that is not a DNS label,
// which also rules out every path trick ("..", "/", NUL, upper case), and
// for a digest that is not 64 lowercase hex digits.
var ErrInvalidName = errors.New("invalid artifact name")

// Dir is the artifacts directory.
type Dir struct{ Root string }

// Written describes stored (or hashed) content.
type Written struct {
	Size   int64
	SHA256 string // hex
}

// ValidName reports whether s may name a pod or an artifact kind.
func ValidName(s string) bool { return len(validation.IsDNS1123Label(s)) == 0 }

// ValidDigest reports whether s is a lowercase hex sha256.
func ValidDigest(s string) bool {
	if len(s) != sha256.Size*2 {
		return false
	}
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// podDir returns <root>/<pod> after checking both names.
func (d Dir) podDir(podID, kind string) (string, error) {
	if !ValidName(podID) || !ValidName(kind) {
		return "", fmt.Errorf("%w: pod %q kind %q", ErrInvalidName, podID, kind)
	}
	return filepath.Join(d.Root, podID), nil
}

// path is the content address of (podID, kind, digest).
func (d Dir) path(podID, kind, digest string) (string, error) {
	dir, err := d.podDir(podID, kind)
	if err != nil {
		return "", err
	}
	if !ValidDigest(digest) {
		return "", fmt.Errorf("%w: digest %q", ErrInvalidName, digest)
	}
	return filepath.Join(dir, kind+"."+digest), nil
}

// Write stages r (at most limit bytes) and commits it under its digest.
func (d Dir) Write(ctx context.Context, podID, kind string, r io.Reader, limit int64) (Written, error) {
	s, err := d.Stage(ctx, podID, kind, r, limit)
	if err != nil {
		return Written{}, err
	}
	if err := s.Commit(ctx); err != nil {
		return Written{}, err
	}
	return s.Written(), nil
}

// Staged is content written and synced where its blob store keeps it,
// hashed, but not yet visible under its content address. Exactly one of
// Commit or Discard must follow; Discard after Commit is a no-op, so
// `defer s.Discard()` is always safe. Committing content whose address
// exists already leaves the one copy: an address only ever holds one
// content.
type Staged interface {
	Written() Written
	Commit(ctx context.Context) error
	Discard()
}

// ErrDone is Commit after Commit or Discard.
var ErrDone = errors.New("staged artifact already committed or discarded")

// fileStaged is a Dir's Staged: a temp file next to its artifact.
type fileStaged struct {
	d        Dir
	tmp, dir string
	podID    string
	kind     string
	written  Written
	done     bool
}

// Stage writes r (at most limit bytes) to a temp file in the pod's
// directory, syncs it and hashes it. More than limit bytes is ErrTooLarge;
// on any error nothing is left behind.
func (d Dir) Stage(_ context.Context, podID, kind string, r io.Reader, limit int64) (Staged, error) {
	dir, err := d.podDir(podID, kind)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("create artifact dir: %w", err)
	}
	tmp, err := os.CreateTemp(dir, "."+kind+tempInfix+"*")
	if err != nil {
		return nil, fmt.Errorf("create temp artifact: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("write artifact %s/%s: %w", podID, kind, err)
	}
	if n > limit {
		return nil, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, limit)
	}
	if err := tmp.Sync(); err != nil {
		return nil, fmt.Errorf("sync artifact: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return nil, fmt.Errorf("close temp artifact: %w", err)
	}
	ok = true
	return &fileStaged{d: d, tmp: tmp.Name(), dir: dir, podID: podID, kind: kind,
		written: Written{Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}}, nil
}

// Written describes the staged content.
func (s *fileStaged) Written() Written { return s.written }

// Commit renames the staged file to its content address and syncs the
// directory so the rename is durable. If the address exists already it
// holds the same bytes, and the rename leaves it so. After a failed rename
// the temp file is removed.
func (s *fileStaged) Commit(context.Context) error {
	if s.done {
		return ErrDone
	}
	s.done = true
	dst, err := s.d.path(s.podID, s.kind, s.written.SHA256)
	if err != nil {
		os.Remove(s.tmp)
		return err
	}
	if err := os.Rename(s.tmp, dst); err != nil {
		os.Remove(s.tmp)
		return fmt.Errorf("commit artifact: %w", err)
	}
	syncDir(s.dir)
	return nil
}

// Discard removes the staged file. It does nothing after Commit or an
// earlier Discard.
func (s *fileStaged) Discard() {
	if s.done {
		return
	}
	s.done = true
	os.Remove(s.tmp)
}

// Remove deletes the committed file of (podID, kind, digest). Callers use
// it only for content the store did not record (a lost claim); a missing
// file is not an error.
func (d Dir) Remove(_ context.Context, podID, kind, digest string) error {
	p, err := d.path(podID, kind, digest)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove artifact: %w", err)
	}
	syncDir(filepath.Dir(p))
	return nil
}

// Open opens the content the store recorded for (podID, kind) with digest.
// When that file does not exist it falls back to the pre-content-address
// file <root>/<pod>/<kind> of records written before. Missing content is
// an error that wraps fs.ErrNotExist.
func (d Dir) Open(_ context.Context, podID, kind, digest string) (io.ReadCloser, error) {
	p, err := d.path(podID, kind, digest)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		if legacy, lerr := os.Open(filepath.Join(filepath.Dir(p), kind)); lerr == nil {
			if fi, serr := legacy.Stat(); serr == nil && fi.Mode().IsRegular() {
				return legacy, nil
			}
			legacy.Close()
		}
	}
	if err != nil {
		return nil, err
	}
	return f, nil
}

// syncDir makes a rename or remove in dir durable (best effort: some
// filesystems refuse to sync a directory).
func syncDir(dir string) {
	if df, err := os.Open(dir); err == nil {
		_ = df.Sync()
		df.Close()
	}
}

// LogKind is the kind of the tier-1 log the controller collects (R-C7).
const LogKind = "log"

// ReservedPrefix starts every other kind the controller owns.
const ReservedPrefix = "crucible-"

// Reserved reports whether kind belongs to the controller: "log" and
// "crucible-*". A work pod runs user code, so the drop-box refuses these
// kinds whatever token comes with them (R-IN7).
func Reserved(kind string) bool { return kind == LogKind || strings.HasPrefix(kind, ReservedPrefix) }

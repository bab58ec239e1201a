// Package artifact owns the artifact files on disk: one file per (work pod,
// kind), written atomically — temp file, fsync, rename, fsync of the
// directory — so a reader never sees half an artifact and a crash leaves at
// most a temp file that the next write of the same artifact replaces.
package artifact

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/util/validation"
)

// ErrTooLarge is returned when content exceeds the limit; nothing is written.
var ErrTooLarge = errors.New("artifact too large")

// ErrInvalidName is returned for a pod id or kind that is not a DNS label,
// which also rules out every path trick ("..", "/", NUL, upper case).
var ErrInvalidName = errors.New("invalid artifact name")

// Dir is the artifacts directory.
type Dir struct{ Root string }

// Written describes a stored artifact.
type Written struct {
	Size   int64
	SHA256 string // hex
}

// ValidName reports whether s may name a pod or an artifact kind.
func ValidName(s string) bool { return len(validation.IsDNS1123Label(s)) == 0 }

func (d Dir) path(podID, kind string) (string, error) {
	if !ValidName(podID) || !ValidName(kind) {
		return "", fmt.Errorf("%w: pod %q kind %q", ErrInvalidName, podID, kind)
	}
	return filepath.Join(d.Root, podID, kind), nil
}

// Write stores r as the artifact podID/kind, at most limit bytes. It replaces
// an existing file only by rename, so a concurrent Open sees the old or the
// new content, never a mix.
func (d Dir) Write(podID, kind string, r io.Reader, limit int64) (Written, error) {
	s, err := d.Stage(podID, kind, r, limit)
	if err != nil {
		return Written{}, err
	}
	if err := s.Commit(); err != nil {
		return Written{}, err
	}
	return s.Written(), nil
}

// Staged is content written and synced to a temp file next to its
// artifact, not yet visible under the artifact's name. Exactly one of Commit
// or Discard must follow; Discard after Commit is a no-op, so
// `defer s.Discard()` is always safe.
type Staged struct {
	tmp, dst string
	written  Written
	done     bool
}

// Stage writes r (at most limit bytes) to a temp file in the directory of
// artifact podID/kind, syncs it and hashes it. More than limit bytes is
// ErrTooLarge; on any error nothing is left behind.
func (d Dir) Stage(podID, kind string, r io.Reader, limit int64) (*Staged, error) {
	dst, err := d.path(podID, kind)
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(dst)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("create artifact dir: %w", err)
	}
	tmp, err := os.CreateTemp(dir, "."+kind+".tmp-*")
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
	return &Staged{tmp: tmp.Name(), dst: dst, written: Written{Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}}, nil
}

// Written describes the staged content.
func (s *Staged) Written() Written { return s.written }

// Commit renames the staged file to the artifact's name, replacing any
// existing file atomically, and syncs the directory so the rename is
// durable. After a failed rename the temp file is removed.
func (s *Staged) Commit() error {
	if s.done {
		return errors.New("staged artifact already committed or discarded")
	}
	s.done = true
	if err := os.Rename(s.tmp, s.dst); err != nil {
		os.Remove(s.tmp)
		return fmt.Errorf("commit artifact: %w", err)
	}
	if df, err := os.Open(filepath.Dir(s.dst)); err == nil { // make the rename itself durable
		_ = df.Sync()
		df.Close()
	}
	return nil
}

// Discard removes the staged file. It does nothing after Commit or an
// earlier Discard.
func (s *Staged) Discard() {
	if s.done {
		return
	}
	s.done = true
	os.Remove(s.tmp)
}

// Open opens a stored artifact for reading.
func (d Dir) Open(podID, kind string) (*os.File, error) {
	p, err := d.path(podID, kind)
	if err != nil {
		return nil, err
	}
	return os.Open(p)
}

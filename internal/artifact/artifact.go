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
	dst, err := d.path(podID, kind)
	if err != nil {
		return Written{}, err
	}
	dir := filepath.Dir(dst)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return Written{}, fmt.Errorf("create artifact dir: %w", err)
	}
	tmp, err := os.CreateTemp(dir, "."+kind+".tmp-*")
	if err != nil {
		return Written{}, fmt.Errorf("create temp artifact: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), io.LimitReader(r, limit+1))
	if err != nil {
		return Written{}, fmt.Errorf("write artifact %s/%s: %w", podID, kind, err)
	}
	if n > limit {
		return Written{}, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, limit)
	}
	if err := tmp.Sync(); err != nil {
		return Written{}, fmt.Errorf("sync artifact: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return Written{}, err
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return Written{}, fmt.Errorf("commit artifact: %w", err)
	}
	committed = true
	if df, err := os.Open(dir); err == nil { // make the rename itself durable
		_ = df.Sync()
		df.Close()
	}
	return Written{Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// Open opens a stored artifact for reading.
func (d Dir) Open(podID, kind string) (*os.File, error) {
	p, err := d.path(podID, kind)
	if err != nil {
		return nil, err
	}
	return os.Open(p)
}

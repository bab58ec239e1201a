package artifact

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// tempInfix marks temp files: ".<kind>.tmp-<random>". A kind is a DNS
// label, so no committed name ("<kind>.<digest>", or a legacy "<kind>")
// starts with a dot.
const tempInfix = ".tmp-"

// isTemp reports whether name is a staging file.
func isTemp(name string) bool {
	return strings.HasPrefix(name, ".") && strings.Contains(name, tempInfix)
}

// CleanTemp removes the staging files a crash left in the pods'
// directories and returns how many it removed. Call it at start, before
// anything stages: a temp file of a running upload is not told apart from a
// stale one. A missing root is no error (nothing was ever written).
func (d Dir) CleanTemp() (int, error) {
	pods, err := os.ReadDir(d.Root)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read artifacts dir: %w", err)
	}
	removed := 0
	var errs []error
	for _, p := range pods {
		if !p.IsDir() {
			continue
		}
		dir := filepath.Join(d.Root, p.Name())
		files, err := os.ReadDir(dir)
		if err != nil {
			errs = append(errs, fmt.Errorf("read %s: %w", dir, err))
			continue
		}
		for _, f := range files {
			if !f.Type().IsRegular() || !isTemp(f.Name()) {
				continue
			}
			if err := os.Remove(filepath.Join(dir, f.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("remove temp artifact: %w", err))
				continue
			}
			removed++
		}
	}
	return removed, errors.Join(errs...)
}

// FreeBytes returns the space an unprivileged writer may still use on the
// volume that holds the artifacts (statfs: available blocks × block size).
// The root is created if missing, so the answer is about the right volume.
func (d Dir) FreeBytes() (uint64, error) {
	if err := os.MkdirAll(d.Root, 0o750); err != nil {
		return 0, fmt.Errorf("create artifacts dir: %w", err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(d.Root, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", d.Root, err)
	}
	return uint64(st.Bavail) * uint64(st.Bsize), nil //nolint:gosec // Bsize is positive
}

// Digest hashes r (at most limit bytes) without writing it anywhere: how an
// upload is compared with a recorded artifact without staging it. More than
// limit bytes is ErrTooLarge (the rest is not read).
func Digest(r io.Reader, limit int64) (Written, error) {
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(r, limit+1))
	if err != nil {
		return Written{}, fmt.Errorf("hash artifact: %w", err)
	}
	if n > limit {
		return Written{}, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, limit)
	}
	return Written{Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

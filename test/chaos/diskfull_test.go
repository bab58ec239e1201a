package chaos

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
)

// The artifact volume of scenario 9: a tmpfs this small, with the
// drop-box's free-space floor at a quarter of it.
const (
	volumeBytes = 16 << 20
	floorBytes  = 4 << 20
)

// The artifact volume fills while pods push: the controller of a stack of
// this scenario's own keeps its artifacts on a 16 MiB tmpfs, which a ballast
// file fills completely mid-wave and leaves again once pushes were refused.
// Pushes meanwhile get the drop-box's retryable 507 (and `crucible push`
// waits as its Retry-After says, 60 s); nothing partial is stored — every
// file on the volume has the bytes its name's digest says and no staging
// file is left — and every push succeeds once the space is back.
func TestChaos9ArtifactVolumeFull(t *testing.T) {
	if testing.Short() {
		t.Skip("needs real API servers; run without -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("scenario 9 mounts a size-limited tmpfs as the artifact volume, which needs root")
	}
	var volume string
	scenario{
		num: 9, name: "the artifact volume full while pods push",
		injected: fmt.Sprintf("the controller's artifact directory is a %d MiB tmpfs (drop-box floor %d MiB); a ballast file fills it completely while the wave's pods push, and is removed once pushes were refused",
			volumeBytes>>20, floorBytes>>20),
		expected: "pushes answered 507 with Retry-After and retried by `crucible push`; no partial or staging file on the volume; every push and log stored intact after the space returns",
		strict:   true,
		spread:   3 * time.Second,
		stack: func(t *testing.T) *devstack.Stack {
			var s *devstack.Stack
			s, volume = fullableStack(t)
			return s
		},
		inject: func(ctx context.Context, t *testing.T, s *devstack.Stack, r *rand.Rand, w *wave) (int, error) {
			between(ctx, r, 500*time.Millisecond, 1500*time.Millisecond)
			return 1, fillVolume(ctx, s, w, volume)
		},
		check: func(ctx context.Context, _ *testing.T, s *devstack.Stack, w *wave, _ *outcome) {
			n, problems := partialFiles(volume)
			for _, p := range problems {
				w.problem("%s", p)
			}
			w.note("%d files on the artifact volume checked for their digest and for staging leftovers: %d problems", n, len(problems))
		},
	}.run(t)
}

// fullableStack starts a one-spoke stack whose controller's artifact
// directory is a tmpfs of volumeBytes, unmounted when the test ends (also
// when it fails), after the stack has stopped.
func fullableStack(t *testing.T) (*devstack.Stack, string) {
	dir, err := os.MkdirTemp("", "crucible-chaos9-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	volume := filepath.Join(dir, "crucible", "artifacts") // where the stack's profile puts artifacts_dir
	if err := os.MkdirAll(volume, 0o750); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d,mode=0750", volumeBytes), "crucible-chaos9", volume).CombinedOutput(); err != nil {
		t.Fatalf("mount a tmpfs at %s: %v: %s", volume, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", volume).CombinedOutput(); err != nil {
			t.Errorf("unmount %s: %v: %s", volume, err, out)
		}
	})
	opts := stackOptions()
	opts.Dir = dir
	opts.Spokes = opts.Spokes[:1]
	opts.IngestMinFreeBytes = floorBytes
	return devstacktest.Start(t, opts), volume
}

// fillVolume writes a ballast file until the volume is full (ENOSPC), holds
// it until the drop-box has refused pushes (at most 30 s), then removes it.
func fillVolume(ctx context.Context, s *devstack.Stack, w *wave, volume string) error {
	before, err := scrape(ctx, s.Federation.ControllerMetricsURL)
	if err != nil {
		return err
	}
	ballast := filepath.Join(volume, "ballast")
	n, err := fill(ballast)
	if err != nil {
		return err
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(volume, &st); err != nil {
		return fmt.Errorf("statfs %s: %w", volume, err)
	}
	w.note("ballast of %d KiB left %d bytes free on the artifact volume", n>>10, st.Bavail*uint64(st.Bsize))
	filled := time.Now()
	want := max(1, cfg.Pods/4)
	var refused float64
	_ = retryUntil(ctx, func() (bool, error) {
		m, err := scrape(ctx, s.Federation.ControllerMetricsURL)
		if err == nil {
			refused = sum(m, "crucible_ingest_requests_total", `outcome="insufficient_storage"`) - sum(before, "crucible_ingest_requests_total", `outcome="insufficient_storage"`)
		}
		return refused >= float64(want) || time.Since(filled) > 30*time.Second, nil
	})
	held := time.Since(filled)
	if err := os.Remove(ballast); err != nil {
		return fmt.Errorf("remove ballast: %w", err)
	}
	during, err := scrape(ctx, s.Federation.ControllerMetricsURL)
	if err != nil {
		return err
	}
	w.note("volume full for %s: drop-box answers %v, log collections %v",
		held.Round(100*time.Millisecond), byLabel(before, during, "crucible_ingest_requests_total", "outcome"),
		byLabel(before, during, "crucible_log_collections_total", "result"))
	if refused == 0 {
		w.problem("no push was refused with 507 while the volume was full: the fault never bit")
	}
	return nil
}

// fill writes path in 1 MiB blocks until the volume is full and returns
// how much it wrote; ENOSPC is the expected end, any other error is one.
func fill(path string) (int64, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, fmt.Errorf("create ballast: %w", err)
	}
	defer f.Close()
	block := make([]byte, 1<<20)
	var n int64
	for {
		k, err := f.Write(block)
		n += int64(k)
		switch {
		case errors.Is(err, syscall.ENOSPC):
			return n, nil
		case err != nil:
			return n, fmt.Errorf("write ballast: %w", err)
		case n > 2*volumeBytes:
			return n, fmt.Errorf("wrote %d bytes of ballast to a %d-byte volume without filling it", n, volumeBytes)
		}
	}
}

// partialFiles checks every file under volume: committed files are named
// <kind>.<sha256> and must hold exactly those bytes; no staging file
// (.<kind>.tmp-…) may be left once nothing is uploading.
func partialFiles(volume string) (int, []string) {
	var problems []string
	checked := 0
	err := filepath.WalkDir(volume, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		name := d.Name()
		if strings.HasPrefix(name, ".") {
			problems = append(problems, fmt.Sprintf("staging file left on the volume: %s", path))
			return nil
		}
		i := strings.LastIndexByte(name, '.')
		if i < 0 || len(name)-i-1 != sha256.Size*2 {
			problems = append(problems, fmt.Sprintf("file not named <kind>.<sha256>: %s", path))
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(data)
		if hex.EncodeToString(sum[:]) != name[i+1:] {
			problems = append(problems, fmt.Sprintf("%s holds %d bytes whose sha256 is not its name's", path, len(data)))
		}
		checked++
		return nil
	})
	if err != nil {
		problems = append(problems, fmt.Sprintf("walk the artifact volume: %v", err))
	}
	if checked == 0 {
		problems = append(problems, "no artifact file on the volume to check")
	}
	return checked, problems
}

package devstack

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// A stack removes the pod directories a killed stack left behind (their
// process is gone) and nothing else: not a live process's, not an older
// name without a pid, not a file, not another program's directory.
func TestRemoveStalePodDirs(t *testing.T) {
	tmp := t.TempDir()
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	dead := strconv.Itoa(gone.Process.Pid) // exited and reaped
	live := strconv.Itoa(os.Getpid())
	for _, d := range []string{
		podDirPrefix + "wharf-" + dead + "-123",
		podDirPrefix + "my-spoke-" + dead + "-456", // a spoke name with dashes
		podDirPrefix + "dock-" + live + "-789",
		podDirPrefix + "dock-3486070969", // the old name: no pid
		podDirPrefix + "dock-notapid-1",
		"other-wharf-" + dead + "-1",
	} {
		if err := os.MkdirAll(filepath.Join(tmp, d, "volume"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(tmp, podDirPrefix+"file-"+dead+"-1"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var logged int
	removeStalePodDirs(tmp, func(string, ...any) { logged++ })

	entries, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	want := []string{
		podDirPrefix + "dock-3486070969",
		podDirPrefix + "dock-" + live + "-789",
		podDirPrefix + "dock-notapid-1",
		podDirPrefix + "file-" + dead + "-1",
		"other-wharf-" + dead + "-1",
	}
	slices.Sort(want)
	if !slices.Equal(left, want) {
		t.Errorf("left %v, want %v", left, want)
	}
	if logged != 2 {
		t.Errorf("logged %d removals, want 2", logged)
	}
}

// The pods' crucible is runnable by every user, whatever the directory of
// the binary it comes from: a 0700 directory (root's home after `go
// install`, a mktemp -d) left `crucible push` in every pod denied (exit 127).
// Without a binary, no directory goes on the pods' PATH.
func TestInstallCrucibleForThePods(t *testing.T) {
	private := filepath.Join(t.TempDir(), "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(private, "crucible")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho crucible\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	if err := os.Chmod(base, 0o711); err != nil {
		t.Fatal(err)
	}
	dir, err := installCrucible(base, bin)
	if err != nil {
		t.Fatal(err)
	}
	if dir != filepath.Join(base, "bin") {
		t.Errorf("installed in %s, want %s/bin", dir, base)
	}
	for path, want := range map[string]os.FileMode{dir: 0o755 | os.ModeDir, filepath.Join(dir, "crucible"): 0o755} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s has mode %v, want %v", path, fi.Mode(), want)
		}
	}
	got, err := os.ReadFile(filepath.Join(dir, "crucible"))
	if err != nil || string(got) != "#!/bin/sh\necho crucible\n" {
		t.Errorf("installed binary %q, %v: not the original's bytes", got, err)
	}
	if dir, err := installCrucible(t.TempDir(), ""); dir != "" || err != nil {
		t.Errorf("without a binary: %q, %v; want no directory", dir, err)
	}
}

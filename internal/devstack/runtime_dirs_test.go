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

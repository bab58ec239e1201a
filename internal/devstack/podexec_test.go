package devstack

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// runHelper runs the pod helper (this test binary, see podexec.go) with spec
// and returns its combined output.
func runHelper(t *testing.T, spec execSpec, unshare bool) (string, error) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	specFile := filepath.Join(t.TempDir(), "exec.json")
	data, _ := json.Marshal(spec)
	if err := os.WriteFile(specFile, data, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = []string{podExecEnv + "=" + specFile}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if unshare {
		cmd.SysProcAttr.Unshareflags = syscall.CLONE_NEWNS
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// In a private mount namespace the volumes appear at absolute mountPaths that
// do not exist on the host, the host's files beside them stay visible, and
// the host is left as it was.
func TestPodHelperMountsVolumesPrivately(t *testing.T) {
	if err := probeMountNamespace(); err != nil {
		t.Skipf("no mount namespace here: %v", err)
	}
	parent := t.TempDir() // stands in for /etc
	if err := os.WriteFile(filepath.Join(parent, "hostfile"), []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	files, token := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(files, "input.txt"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(token, "token"), []byte("tok"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := execSpec{
		Mounts: []bindMount{
			{Source: token, Target: filepath.Join(parent, "crucible", "ingest"), ReadOnly: true},
			{Source: files, Target: filepath.Join(parent, "crucible", "files"), ReadOnly: true},
		},
		Dir:  parent,
		Argv: []string{"sh", "-c", `cat crucible/files/input.txt crucible/ingest/token hostfile; { echo > crucible/files/x; } 2>/dev/null || echo read-only`},
		Env:  []string{"PATH=/usr/bin:/bin"},
	}
	out, err := runHelper(t, spec, true)
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	if out != "hellotokhostread-only\n" {
		t.Errorf("output = %q", out)
	}
	if _, err := os.Stat(filepath.Join(parent, "crucible")); !os.IsNotExist(err) {
		t.Errorf("the host's directory got a crucible entry (stat: %v)", err)
	}
}

// A memory-backed emptyDir is a tmpfs of its sizeLimit, owned by the pod's
// user, in the pod's mount namespace only: the kernel refuses a write beyond
// the size.
func TestPodHelperMountsSizedTmpfs(t *testing.T) {
	if err := probeMountNamespace(); err != nil {
		t.Skipf("no mount namespace here: %v", err)
	}
	dir := t.TempDir()
	target := filepath.Join(dir, "shm")
	spec := execSpec{
		Mounts: []bindMount{{Target: target, Tmpfs: &tmpfsMount{SizeBytes: 1 << 20, UID: os.Geteuid(), GID: os.Getegid()}}},
		Dir:    dir,
		Argv: []string{"sh", "-c", `set -- $(df -k shm | tail -n 1); echo "$2"; stat -c %u shm; ` +
			`dd if=/dev/zero of=shm/fill bs=4096 count=300 2>/dev/null && echo fitted || echo full`},
		Env: []string{"PATH=/usr/bin:/bin"},
	}
	out, err := runHelper(t, spec, true)
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	if want := fmt.Sprintf("1024\n%d\nfull\n", os.Geteuid()); out != want {
		t.Errorf("output = %q, want %q", out, want)
	}
	if entries, err := os.ReadDir(target); err == nil && len(entries) != 0 {
		t.Errorf("the host's %s has %v: the tmpfs was not the pod's own", target, entries)
	}
}

// The helper drops to the pod's user before exec.
func TestPodHelperRunsAsNobody(t *testing.T) {
	who := currentPodUser()
	if !who.set {
		t.Skip("not root")
	}
	dir := t.TempDir()
	out, err := runHelper(t, execSpec{Dir: dir, Argv: []string{"id", "-u"}, Env: []string{"PATH=/usr/bin:/bin"}, SetUser: true, UID: who.uid, GID: who.gid}, false)
	if err != nil || strings.TrimSpace(out) != "65534" {
		t.Errorf("id -u = %q (%v), want 65534", out, err)
	}
}

// Hostile or broken specs end the helper with exit code 127 and a message,
// which is what the pod's log then shows.
func TestPodHelperFailsClearly(t *testing.T) {
	dir := t.TempDir()
	for name, tt := range map[string]struct {
		spec execSpec
		want string
	}{
		"no command":         {execSpec{Dir: dir}, "no command"},
		"not on PATH":        {execSpec{Dir: dir, Argv: []string{"no-such-binary-xyz"}, Env: []string{"PATH=/usr/bin"}}, "executable file not found"},
		"missing workdir":    {execSpec{Dir: filepath.Join(dir, "missing"), Argv: []string{"true"}}, "working directory"},
		"mount from nowhere": {execSpec{Dir: dir, Argv: []string{"true"}, Mounts: []bindMount{{Source: filepath.Join(dir, "nope"), Target: "/x"}}}, "volume for /x"},
		"relative target":    {execSpec{Dir: dir, Argv: []string{"true"}, Mounts: []bindMount{{Source: dir, Target: "rel"}}}, "not absolute"},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := runHelper(t, tt.spec, false)
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 127 || !strings.Contains(out, tt.want) {
				t.Errorf("helper = %v, %q; want exit 127 saying %q", err, out, tt.want)
			}
		})
	}
}

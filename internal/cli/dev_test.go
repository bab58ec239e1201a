package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
)

func TestMain(m *testing.M) {
	os.Exit(devstacktest.Main(m, devstack.Options{}))
}

// dev up --detach leaves a stack that kubectl can use; dev down stops every
// process of it.
func TestDevUpDetachedThenDown(t *testing.T) {
	if testing.Short() {
		t.Skip("needs real API servers; run without -short")
	}
	tools := devstack.FindTools()
	if err := tools.Check(); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "stack")
	var out, errOut bytes.Buffer
	if err := Run(t.Context(), []string{"dev", "up", "--detach", "--dir", dir, "--crucible-binary", devstacktest.CrucibleBinary(t)}, &out, &errOut); err != nil {
		t.Fatalf("dev up: %v\n%s", err, errOut.String())
	}
	pids := recordedPIDs(t, dir)
	t.Cleanup(func() { // stop the stack even if an assertion below fails
		_, _ = devstack.StopDir(dir, nil)
	})
	if len(pids) != 9 { // etcd, 2 apiservers, kwok, scheduler, controller-manager, crucible controller, webhook, token refresher
		t.Errorf("recorded %d processes, want 9: %v", len(pids), pids)
	}
	for _, f := range []string{"hub.kubeconfig", "wharf.kubeconfig", "ca.crt", "env"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("dev up did not write %s: %v", f, err)
		}
	}

	kubectl := exec.CommandContext(t.Context(), tools.Kubectl(), "--kubeconfig", filepath.Join(dir, "wharf.kubeconfig"), "get", "nodes", "--no-headers")
	got, err := kubectl.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl get nodes: %v\n%s", err, got)
	}
	fields := strings.Fields(string(got))
	if len(fields) < 2 || fields[0] != devstack.NodeName || fields[1] != "Ready" {
		t.Errorf("kubectl get nodes = %q, want %s Ready", got, devstack.NodeName)
	}

	// A second up on the same directory refuses instead of starting twice.
	err = Run(t.Context(), []string{"dev", "up", "--detach", "--dir", dir}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "already running") {
		t.Errorf("second dev up: err = %v, want already running", err)
	}

	out.Reset()
	if err := Run(t.Context(), []string{"dev", "down", "--dir", dir}, &out, &errOut); err != nil {
		t.Fatalf("dev down: %v", err)
	}
	if want := "stopped 9 processes of the stack in " + dir + "\n"; out.String() != want {
		t.Errorf("dev down printed %q, want %q", out.String(), want)
	}
	for name, pid := range pids {
		if err := syscall.Kill(pid, 0); err == nil {
			if cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); len(cmdline) > 0 {
				t.Errorf("%s (pid %d) still running after dev down", name, pid)
			}
		}
	}
}

func recordedPIDs(t *testing.T, dir string) map[string]int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "stack.json"))
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Processes []struct {
			Name string
			PID  int
		}
	}
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}
	m := map[string]int{}
	for _, p := range st.Processes {
		m[p.Name] = p.PID
	}
	return m
}

func TestDevDownWithoutStack(t *testing.T) {
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	err := Run(t.Context(), []string{"dev", "down", "--dir", dir}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "no dev stack recorded in "+dir) {
		t.Fatalf("err = %v, want no dev stack recorded", err)
	}
}

func TestVersion(t *testing.T) {
	var out bytes.Buffer
	if err := Run(t.Context(), []string{"version"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "crucible dev (go1.") {
		t.Errorf("version = %q", out.String())
	}
}

package devstack_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"crucible.dev/crucible/internal/devstack"
)

func TestMissingToolsNameMakeTools(t *testing.T) {
	empty := t.TempDir()
	_, err := devstack.Start(t.Context(), devstack.Options{Tools: devstack.Tools{Dir: empty}, Dir: t.TempDir()})
	if !errors.Is(err, devstack.ErrToolsMissing) {
		t.Fatalf("err = %v, want ErrToolsMissing", err)
	}
	for _, want := range []string{`run "make tools"`, filepath.Join(empty, "k8s-"+devstack.KubernetesVersion, "kube-apiserver"), "etcd"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestInvalidSpokeNamesAllReported(t *testing.T) {
	_, err := devstack.Start(t.Context(), devstack.Options{Dir: t.TempDir(), Spokes: []devstack.SpokeOptions{
		{Name: "Wharf"}, {Name: "dock"}, {Name: "dock"}, {Name: "hub"},
	}})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{`spokes[0].name "Wharf"`, `spokes[2].name "dock": used twice`, `spokes[3].name "hub"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

// A process that dies while starting is reported with the tail of its log,
// and nothing the failed start began is left running.
func TestDyingProcessReportsLogTailAndCleansUp(t *testing.T) {
	if testing.Short() {
		t.Skip("needs real API servers; run without -short")
	}
	if err := devstack.FindTools().Check(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	_, err := devstack.Start(t.Context(), devstack.Options{Dir: dir, ExtraAPIServerArgs: []string{"--no-such-flag=1"}})
	if !errors.Is(err, devstack.ErrProcessExited) {
		t.Fatalf("err = %v, want ErrProcessExited", err)
	}
	for _, want := range []string{"kube-apiserver-hub", "unknown flag: --no-such-flag", filepath.Join(dir, "logs", "kube-apiserver-hub.log")} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q:\n%v", want, err)
		}
	}
	if left := processesMentioning(t, dir); len(left) > 0 {
		t.Errorf("processes left running after a failed start: %v", left)
	}
}

// processesMentioning lists live processes whose command line contains s.
func processesMentioning(t *testing.T, s string) []string {
	t.Helper()
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err != nil || len(data) == 0 {
			continue
		}
		if strings.Contains(string(data), s) {
			found = append(found, fmt.Sprintf("%s: %s", filepath.Dir(p), strings.ReplaceAll(string(data), "\x00", " ")))
		}
	}
	return found
}

// The versions the Go code looks for are the ones hack/build-tools.sh builds.
func TestToolVersionsMatchBuildScript(t *testing.T) {
	script, err := os.ReadFile("../../hack/build-tools.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"K8S_VERSION=" + devstack.KubernetesVersion,
		"ETCD_VERSION=" + devstack.EtcdVersion,
		"KWOK_VERSION=" + devstack.KwokVersion,
		"KUEUE_VERSION=" + devstack.KueueVersion,
	} {
		if !strings.Contains(string(script), "\n"+want+"\n") {
			t.Errorf("hack/build-tools.sh does not set %s", want)
		}
	}
}

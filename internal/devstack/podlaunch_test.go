package devstack

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestExpandEnvAsKubernetes(t *testing.T) {
	vars := map[string]string{"A": "x", "EMPTY": ""}
	lookup := func(n string) (string, bool) { v, ok := vars[n]; return v, ok }
	for in, want := range map[string]string{
		"plain":          "plain",
		"$(A)":           "x",
		"a$(A)b$(A)":     "axbx",
		"$(EMPTY)|":      "|",
		"$(UNDEFINED)":   "$(UNDEFINED)",
		"$$(A)":          "$(A)",
		"$$":             "$",
		"$":              "$",
		"a$b":            "a$b",
		"$(A":            "$(A",
		"$()":            "$()",
		"$(A)$(A)$$$(A)": "xx$x",
	} {
		if got := expandEnv(in, lookup); got != want {
			t.Errorf("expandEnv(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRewritePathsPointsAtVolumes(t *testing.T) {
	mounts := []bindMount{
		{Source: "/p/volumes/files", Target: "/etc/crucible/files"},
		{Source: "/p/volumes/token", Target: "/var/run/secrets/crucible/ingest"},
		{Source: "/p/volumes/inner", Target: "/etc/crucible/files/inner"},
	}
	got := rewritePaths([]string{
		"TOKEN=/var/run/secrets/crucible/ingest/token",
		"DIR=/etc/crucible/files",
		"INNER=/etc/crucible/files/inner/x",
		"SIBLING=/etc/crucible/filesystem",
		"OTHER=hello=world",
	}, mounts)
	want := []string{
		"TOKEN=/p/volumes/token/token",
		"DIR=/p/volumes/files",
		"INNER=/p/volumes/inner/x",
		"SIBLING=/etc/crucible/filesystem",
		"OTHER=hello=world",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rewritten env (-want +got):\n%s", diff)
	}
}

func TestPodField(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u-1", Labels: map[string]string{"l": "lv"}, Annotations: map[string]string{"a/b": "av"}},
		Spec:       corev1.PodSpec{NodeName: "n", ServiceAccountName: "sa"},
	}
	for path, want := range map[string]string{
		"metadata.name": "p", "metadata.namespace": "ns", "metadata.uid": "u-1", "spec.nodeName": "n",
		"spec.serviceAccountName": "sa", "status.podIP": podIP, "status.hostIP": podIP,
		"metadata.labels['l']": "lv", "metadata.annotations['a/b']": "av", "metadata.labels['missing']": "",
	} {
		got, err := podField(pod, path)
		if err != nil || got != want {
			t.Errorf("podField(%q) = %q, %v; want %q", path, got, err, want)
		}
	}
	for _, bad := range []string{"", "metadata.generateName", "metadata.labels['l'", "spec.containers[0].image"} {
		if _, err := podField(pod, bad); err == nil {
			t.Errorf("podField(%q): no error", bad)
		}
	}
}

// waitExited leaves the exited process unreaped: its pid, and so the id of
// the group it leads, stays taken — a group kill sent now cannot reach a
// process that reused the number — until cmd.Wait reaps it.
func TestWaitExitedKeepsThePIDUntilReaped(t *testing.T) {
	cmd := exec.Command("sh", "-c", "exit 3")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	waitExited(pid)
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatalf("the exited process was reaped: %v", err)
	}
	if f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:])); len(f) == 0 || f[0] != "Z" {
		t.Fatalf("process %d after waitExited: stat %q, want a zombie", pid, stat)
	}
	if err := syscall.Kill(-pid, 0); err != nil {
		t.Fatalf("its group %d is gone before the reap: %v", pid, err)
	}
	if err := cmd.Wait(); cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 3 {
		t.Fatalf("cmd.Wait after waitExited: %v, state %v, want exit code 3", err, cmd.ProcessState)
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); !os.IsNotExist(err) {
		t.Errorf("process %d still present after cmd.Wait: %v", pid, err)
	}
}

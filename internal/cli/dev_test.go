package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
)

func TestMain(m *testing.M) {
	os.Exit(devstacktest.Main(m, devstack.Options{}))
}

// dev up --detach --sample runs the sample turn (below) and leaves a stack
// that kubectl can use; dev down stops every process of it.
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
	if err := Run(t.Context(), []string{"dev", "up", "--detach", "--sample", "--dir", dir, "--crucible-binary", devstacktest.CrucibleBinary(t)}, &out, &errOut); err != nil {
		t.Fatalf("dev up: %v\n%s", err, errOut.String())
	}
	checkSample(t, out.String())
	pids := recordedPIDs(t, dir)
	t.Cleanup(func() { // stop the stack even if an assertion below fails
		_, _ = devstack.StopDir(dir, nil)
	})
	if len(pids) != 10 { // etcd, 2 apiservers, kwok, scheduler, controller-manager, crucible controller, webhook, token refresher, dev runtime
		t.Errorf("recorded %d processes, want 10: %v", len(pids), pids)
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

	// The detached dev runtime runs a pod; dev down must end it too.
	runDetachedPod(t, filepath.Join(dir, "wharf.kubeconfig")) // its cleanup checks the process group is gone

	// A second up on the same directory refuses instead of starting twice.
	err = Run(t.Context(), []string{"dev", "up", "--detach", "--dir", dir}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "already running") {
		t.Errorf("second dev up: err = %v, want already running", err)
	}

	out.Reset()
	if err := Run(t.Context(), []string{"dev", "down", "--dir", dir}, &out, &errOut); err != nil {
		t.Fatalf("dev down: %v", err)
	}
	if want := "stopped 10 processes of the stack in " + dir + "\n"; out.String() != want {
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

// sampleOut is what dev up --sample prints about its turn: the live log,
// the end state, the collected log and the artifact list.
var sampleOut = regexp.MustCompile(`(?s)\nsample turn (turn-[a-z0-9]+) submitted to [a-z0-9-]+; its log, live:\n(.*?)\n\n` +
	`(turn-[a-z0-9]+): succeeded \(exit code 0\)\n\ncollected log of (turn-[a-z0-9]+):\n(.*?)\nartifacts of (turn-[a-z0-9]+):\n` +
	`KIND +SIZE +SHA256\n(.*?)\nAPI: `)

// checkSample checks the sample turn's report: it printed its lines over a
// few seconds, pushed its result with its own token from inside the pod,
// and succeeded; the live log is exactly the collected one; the artifacts
// are the log and the result with the sha256 push printed.
func checkSample(t *testing.T, out string) {
	t.Helper()
	m := sampleOut.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("dev up --sample printed %q: no sample report", out)
	}
	id, live, collected, table := m[1], m[2]+"\n", m[5], m[7]
	if m[3] != id || m[4] != id || m[6] != id {
		t.Errorf("sample report names pods %q, want only %s", []string{m[1], m[3], m[4], m[6]}, id)
	}
	if live != collected {
		t.Errorf("live log %q differs from the collected log %q", live, collected)
	}
	result := fmt.Sprintf(`{"pod": "%s", "steps": 5}`+"\n", id)
	sum := fmt.Sprintf("%x", sha256.Sum256([]byte(result)))
	want := fmt.Sprintf("sample: a crucible turn running as pod %s\n", id)
	for i := 1; i <= 5; i++ {
		want += fmt.Sprintf("sample: step %d of 5\n", i)
	}
	want += fmt.Sprintf("stored %s/result: %d bytes sha256:%s\nsample: done\n", id, len(result), sum)
	if live != want {
		t.Errorf("sample log %q, want %q", live, want)
	}
	rows := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(table), "\n") {
		f := strings.Fields(line)
		rows[f[0]] = f[1:]
	}
	if r := rows["result"]; len(r) != 2 || r[0] != strconv.Itoa(len(result)) || r[1] != sum {
		t.Errorf("artifact result: %v, want size %d sha256 %s (table %q)", r, len(result), sum, table)
	}
	logSum := fmt.Sprintf("%x", sha256.Sum256([]byte(want)))
	if r := rows["log"]; len(r) != 2 || r[0] != strconv.Itoa(len(want)) || r[1] != logSum {
		t.Errorf("artifact log: %v, want size %d sha256 %s (table %q)", r, len(want), logSum, table)
	}
	if len(rows) != 2 {
		t.Errorf("artifacts %q, want only log and result", table)
	}
}

// runDetachedPod starts a long-running pod on the stack and, at cleanup (after
// dev down), checks that its process group is gone.
func runDetachedPod(t *testing.T, kubeconfig string) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "detached", Namespace: devstack.SpokeNamespace},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{
			Name: "work", Image: "x", Command: []string{"sh", "-c", "echo $$$$; sleep 3600"}, // $$$$: the shell's $$
		}}},
	}
	if _, err := client.CoreV1().Pods(devstack.SpokeNamespace).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pgid int
	err = wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		raw, err := client.CoreV1().Pods(devstack.SpokeNamespace).GetLogs("detached", &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			return false, nil
		}
		first, _, ok := strings.Cut(string(raw), "\n")
		pgid, _ = strconv.Atoi(first)
		return ok && pgid > 1, nil
	})
	if err != nil {
		t.Fatalf("detached pod never logged its pid: %v", err)
	}
	t.Cleanup(func() {
		if devstack.LiveInGroup(pgid) > 0 {
			t.Errorf("pod process group %d still alive after dev down", pgid)
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
	})
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

package e2e

// The whole loop as a user drives it: the crucible CLI (in-process) against
// the dev stack, whose runtime runs each pod's command for real.

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"crucible.dev/crucible/internal/cli"
	"crucible.dev/crucible/internal/devstack"
)

// crucibleCLI runs the crucible command line in-process against the stack's
// controller API (--server goes right after the subcommand words).
func crucibleCLI(t *testing.T, s *devstack.Stack, words []string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	argv := append(append(append([]string{}, words...), "--server", s.Federation.ControllerInternalURL), args...)
	err = cli.Run(t.Context(), argv, &out, &errOut)
	return out.String(), errOut.String(), err
}

// submitWait runs `crucible submit --wait --image busybox -- sh -c script`
// and returns the new pod's id.
func submitWait(t *testing.T, s *devstack.Stack, script string) (string, error) {
	t.Helper()
	out, errOut, err := crucibleCLI(t, s, []string{"submit"}, "--wait", "--image", "busybox", "--", "sh", "-c", script)
	id, _, _ := strings.Cut(out, "\n")
	if id == "" {
		t.Fatalf("submit printed no pod id: %q %q %v", out, errOut, err)
	}
	return id, err
}

// `crucible submit --wait` then `crucible logs` prints exactly what the
// pod printed; a failing command fails the pod with its exit code; one pod's
// log never holds another's.
func TestLoopSubmitWaitThenLogs(t *testing.T) {
	s := sharedStack(t)
	hello, err := submitWait(t, s, "echo hello")
	if err != nil {
		t.Fatalf("submit --wait of echo hello: %v", err)
	}
	failing, err := submitWait(t, s, "echo second; exit 3")
	if err == nil || !strings.Contains(err.Error(), "failed") {
		t.Errorf("submit --wait of exit 3: %v, want an error saying failed", err)
	}
	if wp := getPod(t, s, failing); wp.State != "failed" || wp.ExitCode == nil || *wp.ExitCode != 3 {
		t.Errorf("pod of exit 3: %+v, want failed with exit code 3", wp)
	}
	for id, want := range map[string]string{hello: "hello\n", failing: "second\n"} {
		out, errOut, err := crucibleCLI(t, s, []string{"logs"}, id)
		if err != nil || out != want {
			t.Errorf("crucible logs %s: %q %v (%s), want exactly %q", id, out, err, errOut, want)
		}
	}
}

// `crucible pods cancel` of a running pod: its process group (the shell and
// its child) is gone within the pod's grace period.
func TestLoopCancelEndsTheProcess(t *testing.T) {
	s := sharedStack(t)
	out, errOut, err := crucibleCLI(t, s, []string{"submit"}, "--image", "busybox", "--", "sh", "-c", "sleep 3600 & wait")
	id := strings.TrimSpace(out)
	if err != nil || id == "" {
		t.Fatalf("submit: %q %v (%s)", out, err, errOut)
	}
	t.Cleanup(func() { cancelPodQuietly(s, id) })
	waitRunning(t, s, id)
	pod, err := s.Spoke("wharf").Client.CoreV1().Pods(devstack.SpokeNamespace).Get(t.Context(), id, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pid := podPID(t, pod)
	// The shell forks its sleep right away; both are in the group.
	err = wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return devstack.LiveInGroup(pid) == 2, nil
	})
	if err != nil {
		t.Fatalf("pod process group %d: %d live processes, want the shell and its sleep", pid, devstack.LiveInGroup(pid))
	}
	grace := time.Duration(corev1.DefaultTerminationGracePeriodSeconds) * time.Second
	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
		grace = time.Duration(*g) * time.Second
	}
	if out, errOut, err := crucibleCLI(t, s, []string{"pods", "cancel"}, id); err != nil {
		t.Fatalf("pods cancel: %q %v (%s)", out, err, errOut)
	}
	err = wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, grace, true, func(context.Context) (bool, error) {
		return devstack.LiveInGroup(pid) == 0, nil
	})
	if err != nil {
		t.Errorf("%d processes of pod %s (group %d) still alive %s after cancel", devstack.LiveInGroup(pid), id, pid, grace)
	}
	if st := getPod(t, s, id).State; st != "cancelled" {
		t.Errorf("state after cancel: %s, want cancelled", st)
	}
}

// podPID is the pod's process id, which the dev runtime records in the
// container id (crucible-dev://PID); the process leads its own group.
func podPID(t *testing.T, pod *corev1.Pod) int {
	t.Helper()
	if len(pod.Status.ContainerStatuses) != 1 {
		t.Fatalf("pod %s: container statuses %+v", pod.Name, pod.Status.ContainerStatuses)
	}
	raw, ok := strings.CutPrefix(pod.Status.ContainerStatuses[0].ContainerID, "crucible-dev://")
	pid, err := strconv.Atoi(raw)
	if !ok || err != nil || pid <= 1 {
		t.Fatalf("container id %q: want crucible-dev://PID", pod.Status.ContainerStatuses[0].ContainerID)
	}
	return pid
}

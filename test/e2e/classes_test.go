package e2e

// Pod classes on the dev stack's real kube-scheduler: wharf has a CPU node
// and a tainted GPU node with 4 GPUs, dock a CPU node only; the stack's
// profile has a light "standard" default and a "gpu" class offered on wharf
// only (devstack's podClasses).

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/podclass"
	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/render"
	"crucible.dev/crucible/internal/workpod"
)

// spokePod is work pod id's pod on spoke c.
func spokePod(t *testing.T, c *devstack.Cluster, id string) *corev1.Pod {
	t.Helper()
	pod, err := c.Client.CoreV1().Pods(devstack.SpokeNamespace).Get(t.Context(), id, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("pod %s on %s: %v", id, c.Name, err)
	}
	return pod
}

// unschedulable waits until the scheduler says why pod id cannot be placed.
func unschedulable(t *testing.T, c *devstack.Cluster, id string, within time.Duration) string {
	t.Helper()
	var msg string
	err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, within, true, func(context.Context) (bool, error) {
		for _, cond := range spokePod(t, c, id).Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
				msg = cond.Message
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("pod %s never unschedulable: %v", id, err)
	}
	return msg
}

// Four 1-GPU pods of class gpu run at once on wharf's GPU node (and only
// there); a fifth waits "Insufficient nvidia.com/gpu" and runs when one of
// the four ends. A standard pod lands on the CPU node.
func TestGPUClassPodsShareWharfsGPUs(t *testing.T) {
	s := sharedStack(t)
	wharf := s.Spoke("wharf")
	var ids []string
	t.Cleanup(func() {
		for _, id := range ids {
			cancelPodQuietly(s, id)
		}
	})
	for range 4 {
		wp := submit(t, s, apiv1.SubmitRequest{Cluster: "wharf", Image: "busybox", Command: sleeps("1h"), Class: "gpu"})
		ids = append(ids, wp.ID)
	}
	for _, id := range ids {
		waitRunning(t, s, id)
		pod := spokePod(t, wharf, id)
		gpus := pod.Spec.Containers[0].Resources.Limits[devstack.ResourceGPU]
		if pod.Spec.NodeName != devstack.GPUNodeName || gpus.Value() != 1 {
			t.Errorf("gpu pod %s on node %q with %s GPUs, want %s and 1", id, pod.Spec.NodeName, gpus.String(), devstack.GPUNodeName)
		}
	}
	fifth := submit(t, s, apiv1.SubmitRequest{Cluster: "wharf", Image: "busybox", Command: sleeps("1h"), Class: "gpu"})
	ids = append(ids, fifth.ID)
	if msg := unschedulable(t, wharf, fifth.ID, time.Minute); !strings.Contains(msg, "Insufficient nvidia.com/gpu") {
		t.Errorf("the fifth gpu pod waits with %q, want Insufficient nvidia.com/gpu", msg)
	}
	if state := getPod(t, s, fifth.ID).State; state != "dispatched" {
		t.Errorf("the waiting fifth pod is %s, want dispatched", state)
	}
	if code, body := apiCall(t, s, http.MethodPost, "/api/pods/"+ids[0]+"/cancel", nil); code != http.StatusOK {
		t.Fatalf("cancel %s: %d %s", ids[0], code, body)
	}
	waitRunning(t, s, fifth.ID)
	if node := spokePod(t, wharf, fifth.ID).Spec.NodeName; node != devstack.GPUNodeName {
		t.Errorf("the fifth gpu pod runs on %q, want %s", node, devstack.GPUNodeName)
	}

	standard := submit(t, s, apiv1.SubmitRequest{Cluster: "wharf", Image: "busybox", Command: sleeps("1h")})
	ids = append(ids, standard.ID)
	waitRunning(t, s, standard.ID)
	if node := spokePod(t, wharf, standard.ID).Spec.NodeName; node != devstack.NodeName {
		t.Errorf("a standard pod runs on %q, want the CPU node %s (it does not tolerate the GPU taint)", node, devstack.NodeName)
	}
}

// A pod asking 5 GPUs (the class allows 8, no node has 5) stays pending with
// the scheduler's message; asks beyond the class, or a class the cluster
// withholds, are refused at submit, naming the field and the bound.
func TestGPUAsksBeyondWhatExists(t *testing.T) {
	s := sharedStack(t)
	wp := submit(t, s, apiv1.SubmitRequest{Cluster: "wharf", Image: "busybox", Command: sleeps("1h"), Class: "gpu", GPUs: new(5)})
	t.Cleanup(func() { cancelPodQuietly(s, wp.ID) })
	if msg := unschedulable(t, s.Spoke("wharf"), wp.ID, time.Minute); !strings.Contains(msg, "Insufficient nvidia.com/gpu") {
		t.Errorf("a 5-GPU pod waits with %q, want Insufficient nvidia.com/gpu", msg)
	}
	for _, tc := range []struct {
		name  string
		req   apiv1.SubmitRequest
		field string
		msg   string
	}{
		{"9 gpus", apiv1.SubmitRequest{Cluster: "wharf", Image: "busybox", Class: "gpu", GPUs: new(9)}, "gpus", `must be from 1 to 8 for class "gpu"`},
		{"gpu on dock", apiv1.SubmitRequest{Cluster: "dock", Image: "busybox", Class: "gpu"}, "class", `class "gpu" is not offered on cluster "dock"`},
		{"a deadline past the class's", apiv1.SubmitRequest{Cluster: "wharf", Image: "busybox", Deadline: "49h"}, "deadline", `must be at most 48h0m0s for class "standard"`},
	} {
		code, body := apiCall(t, s, http.MethodPost, "/api/pods", tc.req)
		var answer struct{ Error, Field string }
		_ = json.Unmarshal(body, &answer)
		if code != http.StatusUnprocessableEntity || answer.Field != tc.field || !strings.Contains(answer.Error, tc.msg) {
			t.Errorf("%s: %d %s, want 422 naming %q with %q", tc.name, code, body, tc.field, tc.msg)
		}
	}
}

// A pod's deadline is the spoke's to enforce: a 5 s deadline on `sleep 60`
// fails the pod with DeadlineExceeded while the controller is down, and the
// controller, back, records it and still collects its log.
func TestDeadlineHoldsWhileTheControllerIsAway(t *testing.T) {
	s := sharedStack(t)
	script := "echo started; sleep 60"
	wp := submit(t, s, apiv1.SubmitRequest{Cluster: "wharf", Image: "busybox", Command: []string{"sh", "-c", script}, Deadline: "5s"})
	if d := spokePod(t, s.Spoke("wharf"), wp.ID).Spec.ActiveDeadlineSeconds; d == nil || *d != 5 {
		t.Fatalf("activeDeadlineSeconds %v, want 5", d)
	}
	if err := s.KillProcess("crucible-controller"); err != nil {
		t.Fatal(err)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = s.RestartProcess(context.Background(), "crucible-controller", s.ControllerReady)
		}
	})
	err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		pod := spokePod(t, s.Spoke("wharf"), wp.ID)
		return pod.Status.Phase == corev1.PodFailed && pod.Status.Reason == "DeadlineExceeded", nil
	})
	if err != nil {
		t.Fatalf("with the controller away, the pod did not fail DeadlineExceeded: %v", err)
	}
	restarted = true
	if err := s.RestartProcess(t.Context(), "crucible-controller", s.ControllerReady); err != nil {
		t.Fatal(err)
	}
	done := waitState(t, s, wp.ID, "failed", time.Minute)
	if !strings.Contains(done.Reason, "DeadlineExceeded") {
		t.Errorf("reason %q, want DeadlineExceeded", done.Reason)
	}
	err = wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return getPod(t, s, wp.ID).LogCollected, nil
	})
	if err != nil {
		t.Fatalf("the log of the pod that hit its deadline was not collected: %v", err)
	}
	code, body := apiCall(t, s, http.MethodGet, "/api/pods/"+wp.ID+"/artifacts/log", nil)
	if code != http.StatusOK || !strings.Contains(string(body), "started") {
		t.Errorf("log artifact: %d %q, want the pod's output", code, body)
	}
}

// A gpu pod's /dev/shm is memory-backed and of the class's size (1Gi in the
// dev profile), as the dev runtime mounts it.
func TestGPUPodsDevShmHasTheClassSize(t *testing.T) {
	s := sharedStack(t)
	wp := submit(t, s, apiv1.SubmitRequest{Cluster: "wharf", Image: "busybox", Class: "gpu",
		Command: []string{"sh", "-c", "df -k /dev/shm | tail -1"}})
	waitState(t, s, wp.ID, "succeeded", 2*time.Minute)
	code, body := apiCall(t, s, http.MethodGet, "/api/pods/"+wp.ID+"/artifacts/log", nil)
	if code != http.StatusOK {
		t.Fatalf("log: %d %s", code, body)
	}
	// df -k: filesystem, 1K-blocks, used, available, use%, mounted on.
	fields := strings.Fields(string(body))
	if len(fields) < 6 || fields[0] != "tmpfs" || fields[1] != "1048576" || fields[5] != "/dev/shm" {
		t.Errorf("df of /dev/shm: %q, want a tmpfs of 1048576 KiB", body)
	}
}

// Every pod crucible renders, of either class and with the push init
// container, is admitted by a spoke namespace that enforces Pod Security
// "restricted" (server-side dry run: admission runs, nothing is created).
func TestRenderedPodsPassPodSecurityRestricted(t *testing.T) {
	s := sharedStack(t)
	wharf := s.Spoke("wharf")
	// The loop namespace exactly as render spoke and the spoke chart make it.
	ns := render.LoopNamespace(profile.ClusterEntry{Name: "wharf", LoopNamespace: "psa-restricted"})
	if _, err := wharf.Client.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = wharf.Client.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: devstack.SpokeServiceAccount}}
	if _, err := wharf.Client.CoreV1().ServiceAccounts(ns.Name).Create(t.Context(), sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	prof, err := profile.Load(s.Federation.ProfileFile)
	if err != nil {
		t.Fatal(err)
	}
	entry, _ := prof.Cluster("wharf")
	entry.LoopNamespace = ns.Name
	pods := prof.Pods
	pods.PushImage = "ghcr.io/crucible-dev/crucible:1"
	for _, class := range []string{"standard", "gpu"} {
		c, err := prof.ClassFor(entry, class, workpod.KindTurn)
		if err != nil {
			t.Fatal(err)
		}
		shape, errs := podclass.Resolve(c, pods.NodeSelector, podclass.Ask{})
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		v, errs := workpod.Check(workpod.WorkPod{ID: "psa-" + class, Kind: workpod.KindTurn, Image: "busybox", Shape: shape})
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		objs, err := render.Turn(entry, pods, prof.Controller.Instance, v)
		if err != nil {
			t.Fatal(err)
		}
		_, err = wharf.Client.CoreV1().Pods(ns.Name).Create(t.Context(), objs.Pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			t.Errorf("class %s: the restricted namespace refused the rendered pod: %v", class, err)
		}
	}
	// The namespace does enforce: a pod without the securityContext fails.
	bare := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bare"}, Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "c", Image: "busybox"}}, ActiveDeadlineSeconds: ptr.To[int64](5)}}
	_, err = wharf.Client.CoreV1().Pods(ns.Name).Create(t.Context(), bare, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err == nil || !strings.Contains(err.Error(), "violates PodSecurity") {
		t.Errorf("a bare pod in the restricted namespace: %v, want a PodSecurity refusal", err)
	}
}

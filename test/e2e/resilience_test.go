package e2e

import (
	"context"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/workpod"
)

// The controller's tokens are replaced and the old ones revoked: nothing the
// controller does fails for good.
func TestControllerTokenRotation(t *testing.T) {
	s := sharedStack(t)
	old, err := os.ReadFile(s.Federation.ControllerTokenFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RotateControllerTokens(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The old tokens' Secret is deleted; once past kube-apiserver's 10 s
	// success cache the hub refuses the old hub token (the spokes' webhook
	// checks signatures only, so revocation shows on the hub).
	err = wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := whoami(ctx, s, s.Hub, strings.TrimSpace(string(old)))
		return apierrors.IsUnauthorized(err), nil
	})
	if err != nil {
		t.Fatal("the hub still accepts the controller's revoked token")
	}
	// The mirror's next fetch (its TTL is 1 s here) meets the revocation
	// and asks again in the same fetch with the rotated token, so the
	// spokes' webhooks get a fresh document, not a stale one or, past
	// the shared stack's 8 s max_stale, a 503.
	resp, err := get(t.Context(), caClientFor(t, s), s.Federation.ControllerExternalURL+"/.well-known/openid-configuration")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Cache-Control"), "public, max-age=") {
		t.Errorf("mirror after the revocation: %d Cache-Control %q, want 200 fresh", resp.StatusCode, resp.Header.Get("Cache-Control"))
	}
	for _, cluster := range []string{"wharf", "dock"} {
		wp := submit(t, s, apiv1.SubmitRequest{Cluster: cluster, Image: "x", Command: sleeps("1s")})
		waitState(t, s, wp.ID, "succeeded", time.Minute)
	}
}

// The spoke's API is down for 20 s while a pod is awaited: the run completes,
// nothing is reaped, no row is failed or lost. On a stack of its own (make
// acceptance): the outage is most of a minute of wall time.
func TestSpokeOutageWhileAwaiting(t *testing.T) {
	t.Parallel()
	s := ownStack(t, stackOptions())
	wharf := s.Spoke("wharf")
	wp := submit(t, s, apiv1.SubmitRequest{Image: "x", Command: sleeps("25s")})
	err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return getPod(t, s, wp.ID).State == "running", nil
	})
	if err != nil {
		t.Fatalf("never running: %+v", getPod(t, s, wp.ID))
	}
	restoreSpokeAfter(t, s, wharf)
	if err := s.StopAPIServer(wharf); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if st := getPod(t, s, wp.ID).State; st != "running" {
			t.Errorf("state during the outage = %s, want running", st)
			break
		}
		time.Sleep(time.Second)
	}
	if err := s.StartAPIServer(t.Context(), wharf); err != nil {
		t.Fatal(err)
	}
	done := waitState(t, s, wp.ID, "succeeded", 2*time.Minute)
	if !done.LogCollected {
		t.Errorf("log not collected: %+v", done)
	}
}

// The controller is SIGKILLed right after a dispatch and started again: it
// re-attaches to the pod instead of dispatching it twice.
func TestControllerCrashAfterDispatch(t *testing.T) {
	s := sharedStack(t)
	wharf := s.Spoke("wharf")
	wp := submit(t, s, apiv1.SubmitRequest{Image: "x", Command: sleeps("8s")})
	if err := s.KillProcess("crucible-controller"); err != nil {
		t.Fatal(err)
	}
	if err := s.RestartProcess(t.Context(), "crucible-controller", s.ControllerReady); err != nil {
		t.Fatal(err)
	}
	done := waitState(t, s, wp.ID, "succeeded", time.Minute)
	if !done.LogCollected || done.PodUID != wp.PodUID {
		t.Errorf("after restart: %+v, want the same pod (uid %s) collected", done, wp.PodUID)
	}
	pods, err := wharf.Client.CoreV1().Pods(devstack.SpokeNamespace).List(t.Context(), metav1.ListOptions{LabelSelector: workpod.LabelWorkPod + "=" + wp.ID})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if string(p.UID) != wp.PodUID {
			t.Errorf("a second pod %s (uid %s) for work pod %s", p.Name, p.UID, wp.ID)
		}
	}
}

// The sweep deletes a crucible-labelled pod without a row after the grace and
// never touches an unlabelled pod; a cluster whose list fails is skipped.
func TestSweep(t *testing.T) {
	s := sharedStack(t)
	wharf := s.Spoke("wharf")
	pods := wharf.Client.CoreV1().Pods(devstack.SpokeNamespace)
	mk := func(name string, labels map[string]string) {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec:       corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "x", Command: sleeps("1h")}}},
		}
		if _, err := pods.Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mk("orphan-labelled", map[string]string{workpod.LabelManagedBy: "crucible", workpod.LabelInstance: devstack.Instance, workpod.LabelWorkPod: "orphan-labelled"})
	mk("unlabelled", map[string]string{"app": "someone-elses"})
	mk("other-instance", map[string]string{workpod.LabelManagedBy: "crucible", workpod.LabelInstance: "another-controller", workpod.LabelWorkPod: "other-instance"})
	created := time.Now()
	err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := pods.Get(ctx, "orphan-labelled", metav1.GetOptions{})
		return err != nil, nil
	})
	if err != nil {
		t.Fatal("orphan never swept")
	}
	// creationTimestamp has whole seconds, so the grace may start up to a
	// second before created.
	if d := time.Since(created); d < orphanGrace-time.Second {
		t.Errorf("orphan swept after %s, before the %s grace", d, orphanGrace)
	}
	for _, name := range []string{"unlabelled", "other-instance"} {
		if p, err := pods.Get(t.Context(), name, metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
			t.Errorf("sweep touched %s: %v", name, err)
		}
	}

	// dock down: its sweep is skipped, and says so.
	dock := s.Spoke("dock")
	restoreSpokeAfter(t, s, dock)
	if err := s.StopAPIServer(dock); err != nil {
		t.Fatal(err)
	}
	waitMetricPrefix(t, s.Federation.ControllerMetricsURL+"/metrics", `crucible_sweep_skipped_total{cluster="dock"} `)
	if err := s.StartAPIServer(t.Context(), dock); err != nil {
		t.Fatal(err)
	}
}

func waitMetricPrefix(t *testing.T, url, prefix string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		resp, err := get(ctx, http.DefaultClient, url)
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 32<<10)
		for {
			n, err := resp.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		return strings.Contains(b.String(), "\n"+prefix), nil
	})
	if err != nil {
		t.Fatalf("%s never had a line starting %q", url, prefix)
	}
}

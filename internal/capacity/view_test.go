package capacity

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
)

// The stack: a hub and the spoke wharf (kwok nodes kwok-node-0 and
// kwok-node-gpu-0, kube-scheduler, kube-controller-manager), no federation.
func TestMain(m *testing.M) { os.Exit(devstacktest.Main(m, devstack.Options{})) }

const testProduct = "TEST-H100"

// TestViewWatchesSpoke runs a view against wharf's kube-apiserver: two
// 8-GPU nodes made through the API (status by UpdateStatus, as a kubelet
// writes it), pods bound to them by spec.nodeName. The view syncs and
// Summary and Judge count them; a reservation ends when its pod shows
// bound; a deleted pod frees its GPUs; a pod that reaches Succeeded stops
// counting; Start returns once ctx ends.
func TestViewWatchesSpoke(t *testing.T) {
	c := devstacktest.Shared(t).Spoke("wharf")
	ctx := t.Context()
	const ns = "capacity-test"
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"cap-h100-0", "cap-h100-1"} {
		createReadyNode(t, c.Client, name)
	}

	v := New(c.Client, Options{Cluster: c.Name})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- v.Start(runCtx) }()
	syncCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := v.WaitForSync(syncCtx); err != nil {
		t.Fatal(err)
	}

	six := gpuPod("six", 6, selectProduct)
	eventually(t, "the new nodes Ready and untainted", v, six, Verdict{Fits: true, Resource: ResourceGPU, Free: 16, Total: 16})
	a := gpuPod("a", 3, selectProduct)
	v.Reserve(ns, "a", a, time.Hour) // on cap-h100-0, the first of two equal nodes
	if diff := cmp.Diff(Verdict{Fits: true, Resource: ResourceGPU, Free: 8, Total: 16}, v.Judge(six)); diff != "" {
		t.Errorf("Judge with pod a reserved (-want +got):\n%s", diff)
	}
	createPod(t, c.Client, ns, bound(a, "cap-h100-0"))
	createPod(t, c.Client, ns, bound(gpuPod("b", 8, selectProduct), "cap-h100-1"))

	eventually(t, "both pods counted", v, six, Verdict{Resource: ResourceGPU, Total: 16,
		Reason: "0/4 nodes fit: 2 didn't match node selector/affinity, 2 too little nvidia.com/gpu (most free 5 of 8, needs 6)"})
	if diff := cmp.Diff(GPUs{Product: testProduct, Nodes: 2, Free: 5, Total: 16}, productGPUs(v.Summary())); diff != "" {
		t.Errorf("Summary's %s GPUs (-want +got):\n%s", testProduct, diff)
	}
	v.mu.RLock()
	reservations := len(v.reservations)
	v.mu.RUnlock()
	if reservations != 0 {
		t.Errorf("%d reservations left once pod a showed bound", reservations)
	}

	if err := c.Client.CoreV1().Pods(ns).Delete(ctx, "b", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "pod b deleted", v, six, Verdict{Fits: true, Resource: ResourceGPU, Free: 8, Total: 16})

	succeed(t, c.Client, ns, "a")
	eventually(t, "pod a succeeded", v, six, Verdict{Fits: true, Resource: ResourceGPU, Free: 16, Total: 16})
	if diff := cmp.Diff(GPUs{Product: testProduct, Nodes: 2, Free: 16, Total: 16}, productGPUs(v.Summary())); diff != "" {
		t.Errorf("Summary's %s GPUs at the end (-want +got):\n%s", testProduct, diff)
	}

	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Start: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("Start did not return within 10s of its context ending")
	}
}

func selectProduct(p *corev1.Pod) {
	p.Spec.NodeSelector = map[string]string{LabelGPUProduct: testProduct}
	p.Spec.Containers[0].Image = "registry.example/none:1"
	p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{ResourceGPU: p.Spec.Containers[0].Resources.Requests[ResourceGPU]}
}

// createReadyNode creates an 8-GPU node no agent runs, and writes its
// status as a kubelet would: allocatable and Ready. kube-controller-manager
// takes the not-ready taint off it; Judge waits for that (eventually).
func createReadyNode(t *testing.T, client kubernetes.Interface, name string) {
	t.Helper()
	ctx := t.Context()
	n := gpuNode(name, 8, testProduct)
	n.Spec.Taints = nil
	status := n.Status
	n.Status = corev1.NodeStatus{}
	if _, err := client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	now := metav1.Now()
	status.Capacity = status.Allocatable
	for i := range status.Conditions {
		status.Conditions[i].LastHeartbeatTime, status.Conditions[i].LastTransitionTime = now, now
	}
	// kube-controller-manager writes the new node too (its taints).
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		node.Status = status
		_, err = client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("node %s status: %v", name, err)
	}
}

// createPod creates p, waiting for the namespace's default service account
// (the service-account admission refuses a pod until it exists).
func createPod(t *testing.T, client kubernetes.Interface, ns string, p *corev1.Pod) {
	t.Helper()
	p = p.DeepCopy()
	p.Namespace = ns
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if apierrors.IsForbidden(err) || apierrors.IsServerTimeout(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		t.Fatalf("create pod %s: %v", p.Name, err)
	}
}

// succeed sets pod name's phase to Succeeded, as its kubelet would.
func succeed(t *testing.T, client kubernetes.Interface, ns, name string) {
	t.Helper()
	p, err := client.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodSucceeded
	if _, err := client.CoreV1().Pods(ns).UpdateStatus(t.Context(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// eventually waits until v judges p as want, failing with the last verdict.
func eventually(t *testing.T, what string, v *View, p *corev1.Pod, want Verdict) {
	t.Helper()
	var got Verdict
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if got = v.Judge(p); got == want {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: Judge (-want +got):\n%s", what, cmp.Diff(want, got))
}

// productGPUs is testProduct's entry of s.
func productGPUs(s Summary) GPUs {
	for _, g := range s.GPUs {
		if g.Product == testProduct {
			return g
		}
	}
	return GPUs{}
}

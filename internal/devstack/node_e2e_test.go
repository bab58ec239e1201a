package devstack_test

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
)

// The spoke's node re-posts its status as a kubelet does: a Ready node whose
// addresses something removed has them back within its heartbeat (10–15 s),
// and its pods' logs — which the API server fetches through the node's
// address — are served again. A CI run once found a spoke's node Ready with
// no addresses for the rest of the run, every pod log failing.
func TestNodeAddressesComeBack(t *testing.T) {
	s := devstacktest.Shared(t)
	spoke := s.Spoke(devstack.DefaultSpokeName)
	nodes := spoke.Client.CoreV1().Nodes()
	before, err := nodes.Get(t.Context(), spoke.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(before.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}) {
		t.Fatalf("node %s has addresses %v, want its InternalIP 127.0.0.1 (kwok's --node-ip)", spoke.NodeName, before.Status.Addresses)
	}
	t.Cleanup(func() { // the shared stack's node as it was, whatever happened here
		ctx := context.WithoutCancel(t.Context())
		if n, err := nodes.Get(ctx, spoke.NodeName, metav1.GetOptions{}); err == nil && len(n.Status.Addresses) == 0 {
			n.Status.Addresses = before.Status.Addresses
			_, _ = nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{})
		}
	})
	cleared, err := nodes.Patch(t.Context(), spoke.NodeName, types.MergePatchType, []byte(`{"status":{"addresses":null}}`), metav1.PatchOptions{}, "status")
	if err != nil {
		t.Fatal(err)
	}
	if len(cleared.Status.Addresses) != 0 {
		t.Fatalf("addresses %v after clearing them: the test proves nothing", cleared.Status.Addresses)
	}
	var got []corev1.NodeAddress
	err = wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := nodes.Get(ctx, spoke.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		got = n.Status.Addresses
		return slices.Equal(got, before.Status.Addresses), nil
	})
	if err != nil {
		t.Fatalf("the node's addresses are %v two minutes after they were removed, want them back: %v", got, before.Status.Addresses)
	}
	createPod(t, spoke, testPod("after-addresses", "echo", "served"))
	waitPod(t, spoke.Client, "after-addresses", finished)
	if log := podLog(t, spoke, "after-addresses"); log != "served\n" {
		t.Errorf("log %q, want %q", log, "served\n")
	}
}

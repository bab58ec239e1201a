package devstack_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
	"crucible.dev/crucible/internal/render"
)

// A stack started as `dev up --spokes wharf,dock --gpu-nodes
// wharf=1x4,dock=2x8:NVIDIA-H100-80GB-HBM3` starts: wharf has its CPU node
// and one 4-GPU A100 node, dock its CPU node and two 8-GPU H100 nodes, each
// Ready with its GPUs allocatable and labelled with its product, and
// kube-scheduler places an 8-GPU pod on one of dock's. The capacity RBAC
// render spoke gives such a spoke lets the controller's user read nodes and
// pods cluster-wide, and nothing more.
func TestGPUNodesFromTheFlag(t *testing.T) {
	names := []string{"wharf", "dock"}
	pools, err := devstack.ParseGPUNodes("wharf=1x4,dock=2x8:NVIDIA-H100-80GB-HBM3", names)
	if err != nil {
		t.Fatal(err)
	}
	spokes := devstack.NamedSpokes(names...)
	devstack.WithGPUNodes(spokes, pools)
	s := devstacktest.Start(t, devstack.Options{Spokes: spokes})

	for _, tc := range []struct {
		spoke, product, gpus string
		nodes                []string
	}{
		{"wharf", "NVIDIA-A100-SXM4-80GB", "4", []string{devstack.NodeName, "kwok-node-gpu-0"}},
		{"dock", "NVIDIA-H100-80GB-HBM3", "8", []string{devstack.NodeName, "kwok-node-gpu-0", "kwok-node-gpu-1"}},
	} {
		spoke := s.Spoke(tc.spoke)
		list, err := spoke.Client.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, n := range list.Items {
			got = append(got, n.Name)
		}
		if diff := cmp.Diff(tc.nodes, got); diff != "" {
			t.Errorf("%s's nodes (-want +got):\n%s", tc.spoke, diff)
		}
		for _, name := range tc.nodes[1:] {
			n := heartbeatNode(t, spoke, name)
			if q := n.Status.Allocatable[devstack.ResourceGPU]; q.String() != tc.gpus || n.Labels["nvidia.com/gpu.product"] != tc.product {
				t.Errorf("%s/%s: %s GPUs of %q, want %s of %s", tc.spoke, name, q.String(), n.Labels["nvidia.com/gpu.product"], tc.gpus, tc.product)
			}
		}
	}

	dock := s.Spoke("dock")
	createPod(t, dock, gpuPod("eight", 8))
	if p := waitPod(t, dock.Client, "eight", running); p.Spec.NodeName != "kwok-node-gpu-0" && p.Spec.NodeName != "kwok-node-gpu-1" {
		t.Errorf("the 8-GPU pod runs on %q, want one of dock's GPU nodes", p.Spec.NodeName)
	}

	const user = "hub:system:serviceaccount:crucible:crucible-controller"
	for _, obj := range render.CapacityRBAC(user) {
		var err error
		switch o := obj.(type) {
		case *rbacv1.ClusterRole:
			_, err = dock.Client.RbacV1().ClusterRoles().Create(t.Context(), o, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			_, err = dock.Client.RbacV1().ClusterRoleBindings().Create(t.Context(), o, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// kube-apiserver's RBAC authorizer reads roles and bindings from its
	// informers: a binding just created is seen a moment later (ci16, seed
	// 1796433325212273126, denied the first review). Once one grant shows,
	// every review below is of the bound role.
	access := func(ctx context.Context, verb, resource, namespace string) (bool, error) {
		review, err := dock.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: user, ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: verb, Resource: resource, Namespace: namespace,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		return review.Status.Allowed, nil
	}
	if err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return access(ctx, "list", "nodes", "")
	}); err != nil {
		t.Fatalf("the capacity binding never took effect: %v", err)
	}
	for _, tc := range []struct {
		verb, resource, namespace string
		want                      bool
	}{
		{"list", "nodes", "", true}, {"watch", "nodes", "", true}, {"get", "nodes", "", true},
		{"list", "pods", "", true}, {"watch", "pods", "kube-system", true},
		{"get", "pods", "kube-system", false}, {"update", "nodes", "", false}, {"list", "secrets", "", false}, {"create", "pods", "", false},
	} {
		allowed, err := access(t.Context(), tc.verb, tc.resource, tc.namespace)
		if err != nil {
			t.Fatal(err)
		}
		if allowed != tc.want {
			t.Errorf("%s %s in %q allowed = %v, want %v", tc.verb, tc.resource, tc.namespace, allowed, tc.want)
		}
	}
}

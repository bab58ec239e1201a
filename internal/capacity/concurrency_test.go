package capacity

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestConcurrentUse judges, summarizes, reserves and releases while pod
// and node events arrive, as the API does while the watches run: under
// -race this is the view's locking test. At the end every pod is gone and
// every reservation released, so the view must be back to empty nodes.
func TestConcurrentUse(t *testing.T) {
	nodes := []*corev1.Node{gpuNode("gpu-a", 8, h100), gpuNode("gpu-b", 8, h100), cpuNode("cpu-0", 64)}
	v, _ := testView(t, nodes)
	var wg sync.WaitGroup
	wg.Go(func() { // the watches' events; not the test goroutine, so no t.Fatal
		for i := range 200 {
			obj, _ := transformPod(gpuPod(fmt.Sprintf("w-%d", i), 1, on("gpu-a")))
			if err := v.podStore.Add(obj); err != nil {
				t.Error(err)
			}
			v.onPod(nil, obj)
			if err := v.podStore.Delete(obj); err != nil {
				t.Error(err)
			}
			v.onPod(obj, nil)
			n, _ := slimNode(gpuNode("gpu-b", 8, h100, func(n *corev1.Node) { n.Spec.Unschedulable = i%2 == 0 }))
			v.onNode(n, false)
		}
	})
	for r := range 2 {
		wg.Go(func() {
			for i := range 200 {
				name := fmt.Sprintf("r-%d-%d", r, i)
				p := gpuPod(name, 1)
				v.Judge(p)
				v.Reserve("work", name, p, ttl)
				v.Summary()
				v.Release("work", name)
			}
		})
	}
	wg.Wait()
	addNode(t, v, gpuNode("gpu-b", 8, h100))
	want := GPUs{Product: h100, Nodes: 2, Free: 16, Total: 16}
	if got := v.Summary().GPUs; len(got) != 1 || got[0] != want {
		t.Errorf("GPUs after everything ended: %+v, want [%+v]", got, want)
	}
}

func TestStartTwice(t *testing.T) {
	v := New(fake.NewClientset(), Options{Cluster: "wharf"})
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // Start returns at once
	if err := v.Start(ctx); err != nil {
		t.Fatalf("first Start: %v", err)
	}
	if err := v.Start(ctx); !errors.Is(err, ErrStarted) {
		t.Errorf("second Start: %v, want ErrStarted", err)
	}
}

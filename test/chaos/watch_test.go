package chaos

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/workpod"
)

// podTracker watches every spoke for crucible's pods and remembers each uid
// ever seen per pod name: more than one uid for a row is a duplicate run.
// Informers resume from their last resourceVersion after an API server
// outage, so a pod created around one is still seen.
type podTracker struct {
	mu   sync.Mutex
	uids map[string]map[string]bool // "cluster/name" → uids
	stop context.CancelFunc
	wg   sync.WaitGroup
}

func trackPods(t *testing.T, s *devstack.Stack) *podTracker {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pt := &podTracker{uids: map[string]map[string]bool{}, stop: cancel}
	t.Cleanup(pt.close)
	sel := workpod.LabelManagedBy + "=" + workpod.ManagedByValue + "," + workpod.LabelInstance + "=" + devstack.Instance
	for _, spoke := range s.Spokes {
		f := informers.NewSharedInformerFactoryWithOptions(spoke.Client, 0,
			informers.WithNamespace(devstack.SpokeNamespace),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = sel }))
		inf := f.Core().V1().Pods().Informer()
		name := spoke.Name
		see := func(obj any) {
			if p, ok := obj.(*corev1.Pod); ok {
				pt.see(name, p)
			}
		}
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    see,
			UpdateFunc: func(_, obj any) { see(obj) },
			DeleteFunc: func(obj any) {
				if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
					obj = d.Obj
				}
				see(obj)
			},
		}); err != nil {
			t.Fatal(err)
		}
		f.Start(ctx.Done())
		pt.wg.Go(func() { <-ctx.Done(); f.Shutdown() })
		syncCtx, done := context.WithTimeout(ctx, time.Minute)
		ok := cache.WaitForCacheSync(syncCtx.Done(), inf.HasSynced)
		done()
		if !ok {
			t.Fatalf("pod informer of %s never synced", name)
		}
	}
	return pt
}

func (pt *podTracker) see(cluster string, p *corev1.Pod) {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	k := cluster + "/" + p.Name
	if pt.uids[k] == nil {
		pt.uids[k] = map[string]bool{}
	}
	pt.uids[k][string(p.UID)] = true
}

// runs is how many distinct pods were ever created for a row.
func (pt *podTracker) runs(cluster, name string) int {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	return len(pt.uids[cluster+"/"+name])
}

func (pt *podTracker) close() {
	pt.stop()
	pt.wg.Wait()
}

// crucibleCount counts the instance's pods now on the spokes whose names are
// in names (rows of the scenario): what the sweep has not removed.
func crucibleCount(ctx context.Context, s *devstack.Stack, names map[string]bool) (int, error) {
	n := 0
	for _, spoke := range s.Spokes {
		pods, err := spoke.Client.CoreV1().Pods(devstack.SpokeNamespace).List(ctx, metav1.ListOptions{
			LabelSelector: workpod.LabelManagedBy + "=" + workpod.ManagedByValue + "," + workpod.LabelInstance + "=" + devstack.Instance,
		})
		if err != nil {
			return 0, fmt.Errorf("list pods of %s: %w", spoke.Name, err)
		}
		for _, p := range pods.Items {
			if names[p.Name] {
				n++
			}
		}
	}
	return n, nil
}

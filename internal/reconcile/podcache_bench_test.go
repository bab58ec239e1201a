package reconcile

import (
	"fmt"
	"runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"crucible.dev/crucible/internal/workpod"
)

// BenchmarkPodCacheMemory measures what one cluster's informer cache costs
// per watched pod once the full pods are gone: 100,000 pods through each
// transform into an indexer, the heap in use after a GC against before.
// The baseline is the cache as it was: each pod slimmed but still a
// *corev1.Pod with its labels, in an indexer with client-go's namespace
// index. "waiting" is the cache of 100,000 pods that each wait (held
// unscheduled, as the startup benchmark's are), what keeping their reason
// and message costs. Run with -benchtime 1x (memory, not time, is the
// figure).
func BenchmarkPodCacheMemory(b *testing.B) {
	const n = 100_000
	cases := []struct {
		name      string
		transform cache.TransformFunc
		indexers  cache.Indexers
		pod       func(int) *corev1.Pod
	}{
		{"slim-corev1-pod", slimCorePod, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}, benchPod},
		{"cached-pod", cachePod, cache.Indexers{}, benchPod},
		{"cached-pod-waiting", cachePod, cache.Indexers{}, benchWaitingPod},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				before := heapInUse()
				indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, tc.indexers)
				for i := range n {
					obj, err := tc.transform(tc.pod(i))
					if err != nil {
						b.Fatal(err)
					}
					if err := indexer.Add(obj); err != nil {
						b.Fatal(err)
					}
				}
				after := heapInUse()
				runtime.KeepAlive(indexer)
				b.ReportMetric(float64(after-before)/(1<<20), "MiB/100k-pods")
				b.ReportMetric(float64(after-before)/n, "B/pod")
			}
		})
	}
}

// heapInUse is the live heap after a full collection.
func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// benchPod is a running work pod as a watch decodes it: every string its own
// allocation, as the decoder makes them.
func benchPod(i int) *corev1.Pod {
	name := fmt.Sprintf("turn-wharf-%05d", i)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: string([]byte("crucible-loops")), UID: types.UID(fmt.Sprintf("6f1c2d3e-4a5b-4c6d-8e9f-%012d", i)),
			ResourceVersion: fmt.Sprint(1_000_000 + i), CreationTimestamp: metav1.Now(),
			Labels: map[string]string{workpod.LabelManagedBy: workpod.ManagedByValue, workpod.LabelInstance: "crucible", workpod.LabelWorkPod: name, workpod.LabelKind: "turn"},
		},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "work", Image: "x", Command: []string{"sleep", "3600"}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
			{Name: "work", Image: "x", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}},
	}
}

// benchWaitingPod is benchPod held unscheduled by a scheduling gate, as
// the API server says so: its own copy of reason and message.
func benchWaitingPod(i int) *corev1.Pod {
	pod := benchPod(i)
	pod.Status = corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: string([]byte("SchedulingGated")), Message: string([]byte("Scheduling is blocked due to non-empty scheduling gates"))}}}
	return pod
}

// slimCorePod is the transform the informer used before cachedPod, kept here
// as the benchmark's baseline.
func slimCorePod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	slim := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, ResourceVersion: pod.ResourceVersion,
			Labels: pod.Labels, CreationTimestamp: pod.CreationTimestamp, DeletionTimestamp: pod.DeletionTimestamp,
		},
		Status: corev1.PodStatus{Phase: pod.Status.Phase, Reason: pod.Status.Reason, Message: pod.Status.Message},
	}
	for _, cs := range pod.Status.ContainerStatuses {
		slim.Status.ContainerStatuses = append(slim.Status.ContainerStatuses, corev1.ContainerStatus{Name: cs.Name, State: cs.State})
	}
	return slim, nil
}

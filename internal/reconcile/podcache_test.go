package reconcile

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"crucible.dev/crucible/internal/store"
	"crucible.dev/crucible/internal/workpod"
)

// inCache is pod as a cluster's informer cache holds it; nil when it is not
// there.
func inCache(pod *corev1.Pod) *cachedPod {
	if pod == nil {
		return nil
	}
	return newCachedPod(pod)
}

// fullPod is a finished work pod as the API server returns it, every part
// the cache drops filled in.
func fullPod() *corev1.Pod {
	created := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	deleted := metav1.NewTime(created.Add(time.Minute))
	grace := int64(30)
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "turn-1", GenerateName: "turn-", Namespace: "loops", UID: "u-1", ResourceVersion: "4711", Generation: 3,
			CreationTimestamp: created, DeletionTimestamp: &deleted, DeletionGracePeriodSeconds: &grace,
			Labels:          map[string]string{workpod.LabelManagedBy: workpod.ManagedByValue, workpod.LabelInstance: "hub-1", workpod.LabelWorkPod: "turn-1"},
			Annotations:     map[string]string{"a": "b"},
			Finalizers:      []string{"f"},
			OwnerReferences: []metav1.OwnerReference{{Name: "o", UID: "u-o"}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "crucible", Operation: metav1.ManagedFieldsOperationUpdate}},
		},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "work", Image: "img", Command: []string{"sh", "-c", "exit 3"},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodFailed, Reason: "Evicted", Message: "node pressure", HostIP: "10.0.0.1", PodIP: "10.1.0.1",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}},
			InitContainerStatuses: []corev1.ContainerStatus{{Name: "init",
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}}},
			ContainerStatuses: []corev1.ContainerStatus{
				{Name: "sidecar", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: created}}},
				{Name: "work", Image: "img", ContainerID: "cri://x", RestartCount: 1,
					LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 9, Reason: "OOMKilled"}},
					State:                corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 3, Reason: "Error", Message: "boom", StartedAt: created}}},
			},
		},
	}
}

// TestCachePod: a full pod becomes exactly the fields the decisions read;
// the transform is idempotent and turns the pod inside a tombstone too.
func TestCachePod(t *testing.T) {
	deleted := metav1.NewTime(time.Date(2026, 1, 2, 3, 5, 5, 0, time.UTC))
	want := &cachedPod{
		Name: "turn-1", Namespace: "loops", ResourceVersion: "4711", UID: "u-1", DeletionTimestamp: &deleted,
		Phase: corev1.PodFailed, Reason: "Evicted", Message: "node pressure",
		Terminated: &podExit{ExitCode: 3, Reason: "Error", Message: "boom"},
	}
	got, err := cachePod(fullPod())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("cachePod (-want +got):\n%s", diff)
	}

	again, err := cachePod(got)
	if err != nil || again != got {
		t.Errorf("cachePod of a cached pod = %v, %v; want the same object", again, err)
	}

	running := fullPod()
	running.DeletionTimestamp = nil
	running.Status = corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
		{Name: "work", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}
	wantRunning := &cachedPod{Name: "turn-1", Namespace: "loops", ResourceVersion: "4711", UID: "u-1", Phase: corev1.PodRunning}
	if diff := cmp.Diff(wantRunning, inCache(running)); diff != "" {
		t.Errorf("running pod (-want +got):\n%s", diff)
	}

	tomb, err := cachePod(cache.DeletedFinalStateUnknown{Key: "loops/turn-1", Obj: fullPod()})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(cache.DeletedFinalStateUnknown{Key: "loops/turn-1", Obj: want}, tomb); diff != "" {
		t.Errorf("tombstone (-want +got):\n%s", diff)
	}
	cachedTomb := cache.DeletedFinalStateUnknown{Key: "loops/turn-1", Obj: want}
	if got, _ := cachePod(cachedTomb); !cmp.Equal(got, cachedTomb) {
		t.Errorf("tombstone of a cached pod changed: %v", got)
	}
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}}
	if got, _ := cachePod(other); got != any(other) {
		t.Errorf("cachePod changed a non-pod: %v", got)
	}
}

// TestCachedPodMeta: the informer's key function and meta.Accessor read a
// cached pod as they read the pod, and a copy shares nothing.
func TestCachedPodMeta(t *testing.T) {
	pod := fullPod()
	c := inCache(pod)
	if k, err := cache.MetaNamespaceKeyFunc(c); err != nil || k != "loops/turn-1" {
		t.Errorf("key = %q, %v; want loops/turn-1", k, err)
	}
	m, err := meta.Accessor(c)
	if err != nil {
		t.Fatal(err)
	}
	if m.GetName() != pod.Name || m.GetNamespace() != pod.Namespace || m.GetUID() != pod.UID ||
		m.GetResourceVersion() != pod.ResourceVersion || !m.GetDeletionTimestamp().Equal(pod.DeletionTimestamp) {
		t.Errorf("meta.Accessor reads %s/%s uid %s rv %s deleted %v", m.GetNamespace(), m.GetName(), m.GetUID(), m.GetResourceVersion(), m.GetDeletionTimestamp())
	}
	m.SetResourceVersion("4712")
	if c.ResourceVersion != "4712" {
		t.Errorf("SetResourceVersion not kept: %q", c.ResourceVersion)
	}
	cp := c.DeepCopyObject().(*cachedPod)
	if diff := cmp.Diff(c, cp); diff != "" {
		t.Errorf("DeepCopyObject (-orig +copy):\n%s", diff)
	}
	if cp.Terminated == c.Terminated || cp.DeletionTimestamp == c.DeletionTimestamp {
		t.Error("DeepCopyObject shares pointers with the original")
	}
}

// TestEventPodName: events name their pod, a missed delete's tombstone
// too; anything else is ignored.
func TestEventPodName(t *testing.T) {
	c := inCache(fullPod())
	tests := []struct {
		name   string
		obj    any
		want   string
		wantOK bool
	}{
		{"cached pod", c, "turn-1", true},
		{"tombstone", cache.DeletedFinalStateUnknown{Key: "loops/turn-1", Obj: c}, "turn-1", true},
		{"full pod, not transformed", fullPod(), "", false},
		{"tombstone of something else", cache.DeletedFinalStateUnknown{Key: "loops/x", Obj: &corev1.ConfigMap{}}, "", false},
		{"nil", nil, "", false},
	}
	for _, tt := range tests {
		if got, ok := eventPodName(tt.obj); got != tt.want || ok != tt.wantOK {
			t.Errorf("%s: eventPodName = %q, %v; want %q, %v", tt.name, got, ok, tt.want, tt.wantOK)
		}
	}
}

// TestPodCacheGet: a missing pod is nil; an object the transform did not
// make is an error, never taken for a missing pod (whose row would be lost).
func TestPodCacheGet(t *testing.T) {
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	c := inCache(fullPod())
	stray := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "stray", Namespace: "loops"}}
	for _, obj := range []any{c, stray} {
		if err := indexer.Add(obj); err != nil {
			t.Fatal(err)
		}
	}
	pods := podCache{indexer: indexer, namespace: "loops"}
	if got, err := pods.get("turn-1"); err != nil || got != c {
		t.Errorf("get(turn-1) = %v, %v; want the cached pod", got, err)
	}
	if got, err := pods.get("absent"); err != nil || got != nil {
		t.Errorf("get(absent) = %v, %v; want nil, nil", got, err)
	}
	if got, err := pods.get("stray"); err == nil || got != nil {
		t.Errorf("get(stray) = %v, %v; want an error", got, err)
	}
	if got, err := (podCache{indexer: indexer, namespace: "other"}).get("turn-1"); err != nil || got != nil {
		t.Errorf("get in another namespace = %v, %v; want nil, nil", got, err)
	}
}

// TestOutcome: the verdict read from a cached pod — the work container's
// exit, and the pod's own reason before the container's.
func TestOutcome(t *testing.T) {
	code := func(c int32) *int32 { return &c }
	withStatus := func(s corev1.PodStatus) *corev1.Pod { p := fullPod(); p.Status = s; return p }
	terminated := func(exit int32, reason, msg string) []corev1.ContainerStatus {
		return []corev1.ContainerStatus{{Name: "work", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exit, Reason: reason, Message: msg}}}}
	}
	tests := []struct {
		name       string
		pod        *corev1.Pod
		wantState  store.State
		wantExit   *int32
		wantReason string
	}{
		{"evicted: the pod's reason before its container's", fullPod(), store.StateFailed, code(3), "Evicted: node pressure"},
		{"failed with a message", withStatus(corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: terminated(3, "Error", "boom")}), store.StateFailed, code(3), "Error: boom"},
		{"failed without a message", withStatus(corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: terminated(137, "OOMKilled", "")}), store.StateFailed, code(137), "OOMKilled"},
		{"succeeded: no reason", withStatus(corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: terminated(0, "Completed", "done")}), store.StateSucceeded, code(0), ""},
		{"no container terminated", withStatus(corev1.PodStatus{Phase: corev1.PodFailed, Reason: "DeadlineExceeded", Message: "too slow"}), store.StateFailed, nil, "DeadlineExceeded: too slow"},
		{"killed at its deadline: the pod's reason, the container's exit", withStatus(corev1.PodStatus{Phase: corev1.PodFailed, Reason: "DeadlineExceeded",
			Message: "Pod was active on the node longer than the specified deadline", ContainerStatuses: terminated(137, "Error", "")}),
			store.StateFailed, code(137), "DeadlineExceeded: Pod was active on the node longer than the specified deadline"},
	}
	for _, tt := range tests {
		state, exit, reason := outcome(inCache(tt.pod))
		if state != tt.wantState || !cmp.Equal(exit, tt.wantExit) || reason != tt.wantReason {
			t.Errorf("%s: outcome = %s, %v, %q; want %s, %v, %q", tt.name, state, exit, reason, tt.wantState, tt.wantExit, tt.wantReason)
		}
	}
}

package reconcile

import (
	"strings"
	"testing"
	"unicode/utf8"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"crucible.dev/crucible/internal/store"
	"crucible.dev/crucible/internal/store/storetest"
)

const unschedulable = "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) had untolerated taint {nvidia.com/gpu: present}. " +
	"preemption: 0/2 nodes are available: 1 No preemption victims found for incoming pod, 1 Preemption is not helpful for scheduling."

// podWith is testPod("u1", phase) on node with status s applied.
func podWith(phase corev1.PodPhase, node string, s func(*corev1.PodStatus)) *corev1.Pod {
	p := testPod("u1", phase)
	p.Spec.NodeName = node
	if s != nil {
		s(&p.Status)
	}
	return p
}

func scheduledFalse(reason, message string) func(*corev1.PodStatus) {
	return func(st *corev1.PodStatus) {
		st.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "NotReady"},
			{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: reason, Message: message}}
	}
}

func containerWaiting(reason, message string) func(*corev1.PodStatus) {
	return func(st *corev1.PodStatus) {
		st.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}
		st.ContainerStatuses = []corev1.ContainerStatus{{Name: "work", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}}}}
	}
}

// TestCachePodWaiting: the cache keeps why a pending pod waits — the
// scheduler's verdict, else the first waiting container, init containers
// first — and where it is bound; a pod that runs or finished waits for
// nothing.
func TestCachePodWaiting(t *testing.T) {
	tests := []struct {
		name       string
		pod        *corev1.Pod
		want       *podWaiting
		wantNode   string
		wantPulled bool
	}{
		{"unschedulable", podWith(corev1.PodPending, "", scheduledFalse("Unschedulable", unschedulable)), &podWaiting{"Unschedulable", unschedulable}, "", false},
		{"held by a scheduling gate", podWith(corev1.PodPending, "", scheduledFalse("SchedulingGated", "Scheduling is blocked due to non-empty scheduling gates")),
			&podWaiting{"SchedulingGated", "Scheduling is blocked due to non-empty scheduling gates"}, "", false},
		{"not looked at yet", podWith(corev1.PodPending, "", nil), nil, "", false},
		{"scheduled, creating", podWith(corev1.PodPending, "gpu-0", containerWaiting("ContainerCreating", "")), &podWaiting{"ContainerCreating", ""}, "gpu-0", false},
		{"image pull back-off", podWith(corev1.PodPending, "gpu-0", containerWaiting("ImagePullBackOff", `Back-off pulling image "nope:1"`)),
			&podWaiting{"ImagePullBackOff", `Back-off pulling image "nope:1"`}, "gpu-0", false},
		{"config error", podWith(corev1.PodPending, "cpu-0", containerWaiting("CreateContainerConfigError", `secret "s" not found`)),
			&podWaiting{"CreateContainerConfigError", `secret "s" not found`}, "cpu-0", false},
		{"an init container's pull comes first", podWith(corev1.PodPending, "cpu-0", func(st *corev1.PodStatus) {
			containerWaiting("PodInitializing", "")(st)
			st.InitContainerStatuses = []corev1.ContainerStatus{{Name: "push", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: "pull failed"}}}}
		}), &podWaiting{"ErrImagePull", "pull failed"}, "cpu-0", false},
		{"running: nothing holds it", podWith(corev1.PodRunning, "cpu-0", func(st *corev1.PodStatus) {
			st.ContainerStatuses = []corev1.ContainerStatus{{Name: "work", ImageID: "docker.io/library/busybox@sha256:ab", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
		}), nil, "cpu-0", true},
		{"finished with a stale condition", podWith(corev1.PodFailed, "cpu-0", scheduledFalse("Unschedulable", "stale")), nil, "cpu-0", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := inCache(tt.pod)
			if diff := cmp.Diff(tt.want, got.Waiting); diff != "" {
				t.Errorf("waiting (-want +got):\n%s", diff)
			}
			if got.Node != tt.wantNode || got.Pulled != tt.wantPulled {
				t.Errorf("node %q pulled %v, want %q %v", got.Node, got.Pulled, tt.wantNode, tt.wantPulled)
			}
		})
	}
}

// TestCachePodWaitingBounded: a spoke's long reason and message are cut
// to the cache's bounds on a rune boundary, into strings of their own; a
// short one is kept as it is.
func TestCachePodWaitingBounded(t *testing.T) {
	long := strings.Repeat("é", maxWaitMessage) // 2 bytes a rune: the bound falls inside none
	reason := strings.Repeat("x", 3*maxWaitReason)
	got := inCache(podWith(corev1.PodPending, "", scheduledFalse(reason, "ab"+long))).Waiting
	if got == nil {
		t.Fatal("no waiting kept")
	}
	if len(got.Message) != maxWaitMessage || !utf8.ValidString(got.Message) || !strings.HasPrefix("ab"+long, got.Message) {
		t.Errorf("message of %d bytes (valid UTF-8 %v), want the first %d bytes cut on a rune boundary", len(got.Message), utf8.ValidString(got.Message), maxWaitMessage)
	}
	if got.Reason != reason[:maxWaitReason] {
		t.Errorf("reason of %d bytes, want %d", len(got.Reason), maxWaitReason)
	}
	odd := "a" + long // the bound falls on the second byte of a rune
	if cut := capText(odd, maxWaitMessage); len(cut) != maxWaitMessage-1 || !utf8.ValidString(cut) {
		t.Errorf("cut inside a rune: %d bytes, valid %v; want %d", len(cut), utf8.ValidString(cut), maxWaitMessage-1)
	}
	if cut := capText(odd, maxWaitMessage); unsafe.StringData(cut) == unsafe.StringData(odd) {
		t.Error("a cut message shares the spoke's string, keeping all of it alive")
	}
	short := "0/1 nodes are available"
	if kept := capText(short, maxWaitMessage); unsafe.StringData(kept) != unsafe.StringData(short) {
		t.Error("a message within the bound was copied")
	}
	if cp := inCache(podWith(corev1.PodPending, "", scheduledFalse("Unschedulable", "m"))); cp.DeepCopyObject().(*cachedPod).Waiting == cp.Waiting {
		t.Error("DeepCopyObject shares the waiting")
	}
}

// TestObservation: what sync writes of a pod's start and wait — only what
// its live row has not recorded.
func TestObservation(t *testing.T) {
	recorded := func(r *store.WorkPod, node string, progress store.Event, w *store.Waiting) *store.WorkPod {
		r.Node, r.Progress, r.Waiting = node, progress, w
		return r
	}
	running := podWith(corev1.PodRunning, "cpu-0", func(st *corev1.PodStatus) {
		st.ContainerStatuses = []corev1.ContainerStatus{{Name: "work", ImageID: "sha256:ab", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	})
	succeeded := podWith(corev1.PodSucceeded, "cpu-0", func(st *corev1.PodStatus) {
		st.ContainerStatuses = []corev1.ContainerStatus{{Name: "work", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{}}}}
	})
	gated := podWith(corev1.PodPending, "", scheduledFalse("Unschedulable", unschedulable))
	all := []store.Event{store.EventScheduled, store.EventPulled, store.EventStarted}
	tests := []struct {
		name   string
		row    *store.WorkPod
		pod    *corev1.Pod
		want   store.Observation
		wantOK bool
	}{
		{"unschedulable, nothing recorded", testRow(store.StateDispatched, "u1"), gated,
			store.Observation{Waiting: &store.Waiting{Reason: "Unschedulable", Message: unschedulable}}, true},
		{"the same wait recorded", recorded(testRow(store.StateDispatched, "u1"), "", "", &store.Waiting{Reason: "Unschedulable", Message: unschedulable}), gated,
			store.Observation{Waiting: &store.Waiting{Reason: "Unschedulable", Message: unschedulable}}, false},
		{"running, nothing recorded", testRow(store.StateDispatched, "u1"), running, store.Observation{Node: "cpu-0", Moments: all}, true},
		{"running, a wait to clear", recorded(testRow(store.StateDispatched, "u1"), "cpu-0", store.EventStarted, &store.Waiting{Reason: "ContainerCreating"}), running,
			store.Observation{Node: "cpu-0", Moments: all}, true},
		{"running, all recorded", recorded(testRow(store.StateRunning, "u1"), "cpu-0", store.EventStarted, nil), running, store.Observation{Node: "cpu-0", Moments: all}, false},
		{"finished before the watch saw it run", testRow(store.StateDispatched, "u1"), succeeded,
			store.Observation{Node: "cpu-0", Moments: []store.Event{store.EventScheduled, store.EventStarted}}, true},
		{"pending row, pod not attached yet", testRow(store.StatePending, ""), gated,
			store.Observation{Waiting: &store.Waiting{Reason: "Unschedulable", Message: unschedulable}}, true},
		{"cancelled row", testRow(store.StateCancelled, "u1"), gated, store.Observation{}, false},
		{"another pod of the name", testRow(store.StateDispatched, "u2"), gated, store.Observation{}, false},
		{"no pod", testRow(store.StateDispatched, "u1"), nil, store.Observation{}, false},
		{"no row", nil, gated, store.Observation{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := observation(syncFacts{Cluster: "wharf", Row: tt.row, Pod: inCache(tt.pod)})
			if diff := cmp.Diff(tt.want, got); diff != "" || ok != tt.wantOK {
				t.Errorf("observation ok %v, want %v; (-want +got):\n%s", ok, tt.wantOK, diff)
			}
		})
	}
}

// TestSyncRecordsWaiting: sync writes a pod's wait and start on its row
// and history once, not once per watch event, moments before the state
// change they led to; the wait is gone once the pod runs.
func TestSyncRecordsWaiting(t *testing.T) {
	st, see := syncFixture(t, store.WorkPod{ID: "p1", Cluster: "wharf", Namespace: "loops", Kind: "turn", State: store.StateDispatched, PodUID: "u1"})
	gated := podWith(corev1.PodPending, "", scheduledFalse("Unschedulable", unschedulable))
	first := see(gated)
	if w := first.Waiting; w == nil || w.Reason != "Unschedulable" || w.Message != unschedulable || !w.Since.Equal(first.UpdatedAt) {
		t.Fatalf("row waiting %+v, want the scheduler's verdict since the write", w)
	}
	if again := see(gated); !again.UpdatedAt.Equal(first.UpdatedAt) {
		t.Errorf("the same wait again wrote the row (updated %v, was %v)", again.UpdatedAt, first.UpdatedAt)
	}
	see(podWith(corev1.PodPending, "cpu-0", containerWaiting("ContainerCreating", "")))
	running := see(podWith(corev1.PodRunning, "cpu-0", func(st *corev1.PodStatus) {
		st.ContainerStatuses = []corev1.ContainerStatus{{Name: "work", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	}))
	if running.Waiting != nil || running.State != store.StateRunning || running.Node != "cpu-0" {
		t.Errorf("running row: state %s node %q waiting %+v; want running on cpu-0, waiting for nothing", running.State, running.Node, running.Waiting)
	}
	h, err := st.PodHistory(t.Context(), "p1")
	if err != nil {
		t.Fatal(err)
	}
	type entry struct {
		Event        store.Event
		State        store.State
		Reason, Mesg string
	}
	var got []entry
	for _, e := range h {
		got = append(got, entry{e.Event, e.State, e.Reason, e.Message})
	}
	want := []entry{
		{store.EventState, store.StateDispatched, "", ""},
		{store.EventWaiting, store.StateDispatched, "Unschedulable", unschedulable},
		{store.EventScheduled, store.StateDispatched, "", "cpu-0"},
		{store.EventWaiting, store.StateDispatched, "ContainerCreating", ""},
		{store.EventStarted, store.StateDispatched, "", ""},
		{store.EventState, store.StateRunning, "", ""},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("history (-want +got):\n%s", diff)
	}
}

// TestSyncRecordsDispatchedBeforeTheWait: the watch may see a pod, and the
// scheduler's verdict on it, while its row is still pending (the dispatcher
// has yet to create the pod's ConfigMap and Secret): the row is recorded
// dispatched, with the pod's uid, before the wait.
func TestSyncRecordsDispatchedBeforeTheWait(t *testing.T) {
	st, see := syncFixture(t, store.WorkPod{ID: "p1", Cluster: "wharf", Namespace: "loops", Kind: "turn", State: store.StatePending})
	p := podWith(corev1.PodPending, "", scheduledFalse("Unschedulable", unschedulable))
	row := see(p)
	if row.State != store.StateDispatched || row.PodUID != string(p.UID) || row.Waiting == nil {
		t.Errorf("row: state %s uid %q waiting %+v; want dispatched with the pod's uid, waiting", row.State, row.PodUID, row.Waiting)
	}
	h, err := st.PodHistory(t.Context(), "p1")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range h {
		got = append(got, string(e.Event)+"/"+string(e.State))
	}
	want := []string{string(store.EventState) + "/" + string(store.StatePending), string(store.EventState) + "/" + string(store.StateDispatched), string(store.EventWaiting) + "/" + string(store.StateDispatched)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("history (-want +got):\n%s", diff)
	}
}

// syncFixture stores row and returns the store and see, which puts a pod
// (in row's namespace) in wharf's cache, syncs row's key and returns the
// row as sync left it.
func syncFixture(t *testing.T, row store.WorkPod) (store.Store, func(*corev1.Pod) store.WorkPod) {
	t.Helper()
	st := storetest.SQLite(t)
	if _, err := st.CreateWorkPod(t.Context(), row); err != nil {
		t.Fatal(err)
	}
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	r := &Reconciler{Store: st, caches: map[string]podCache{row.Cluster: {indexer: indexer, namespace: row.Namespace}}}
	return st, func(p *corev1.Pod) store.WorkPod {
		t.Helper()
		p.Namespace = row.Namespace
		if err := indexer.Update(inCache(p)); err != nil {
			t.Fatal(err)
		}
		if err := r.sync(t.Context(), key{Cluster: row.Cluster, Name: row.ID}); err != nil {
			t.Fatalf("sync: %v", err)
		}
		got, err := st.GetWorkPod(t.Context(), row.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
}

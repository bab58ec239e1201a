package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/capacity"
)

// fakeCapacity answers placement's questions with set verdicts: what a
// spoke's view would say is the capacity package's to test against a real
// API server; here only what the API does with the answers.
type fakeCapacity struct {
	verdicts map[string]capacity.Verdict
	sums     map[string]capacity.Summary
	mu       sync.Mutex
	reserved []string
	released []string
	until    []string
}

func (f *fakeCapacity) Judge(cluster string, pod *corev1.Pod) (capacity.Verdict, bool) {
	v, ok := f.verdicts[cluster]
	return v, ok
}

func (f *fakeCapacity) Reserve(cluster string, pod *corev1.Pod) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reserved = append(f.reserved, cluster+" "+pod.Namespace+"/"+pod.Name)
}

func (f *fakeCapacity) Release(cluster, namespace, name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = append(f.released, cluster+" "+namespace+"/"+name)
}

func (f *fakeCapacity) ReserveUntil(cluster string, pod *corev1.Pod, until time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.until = append(f.until, cluster+" "+pod.Namespace+"/"+pod.Name+" until "+until.UTC().Format(time.RFC3339Nano))
}

func (f *fakeCapacity) Summary(cluster string) (capacity.Summary, bool) {
	s, ok := f.sums[cluster]
	return s, ok
}

// placementFixture: wharf's view says a 2-GPU pod does not fit (1 of 4
// free), dock's that it does (16 free); no spoke of the fixture is known
// unhealthy.
func placementFixture(t *testing.T) (*fixture, *fakeCapacity) {
	t.Helper()
	f := newFixture(t)
	fc := &fakeCapacity{verdicts: map[string]capacity.Verdict{
		"wharf": {Fits: false, Reason: "1 of 4 nvidia.com/gpu free (needs 2)", Resource: "nvidia.com/gpu", Free: 0, Total: 4},
		"dock":  {Fits: true, Resource: "nvidia.com/gpu", Free: 16, Total: 16},
	}}
	f.srv.Capacity = fc
	return f, fc
}

// cluster auto goes where the pod fits, keeps the decision with the row,
// shows it, and counts the pod against the chosen spoke's view.
func TestSubmitAutoPlacesWhereItFits(t *testing.T) {
	f, fc := placementFixture(t)
	w := f.do(t, req{method: "POST", path: "/api/pods", token: "tok-admin", body: `{"cluster":"auto","image":"busybox"}`})
	if w.Code != http.StatusCreated {
		t.Fatalf("submit: %d %s", w.Code, w.Body)
	}
	wp := workPodOf(t, w)
	want := &apiv1.Placement{Chosen: "dock", Decision: "wharf: 1 of 4 nvidia.com/gpu free (needs 2); dock: fits (16 nvidia.com/gpu free)"}
	if wp.Cluster != "dock" || !cmp.Equal(wp.Placement, want) {
		t.Errorf("placed on %s, placement %+v; want dock, %+v", wp.Cluster, wp.Placement, want)
	}
	row, err := f.st.GetWorkPod(t.Context(), wp.ID)
	if err != nil || row.Cluster != "dock" || row.Placement == nil || row.Placement.Decision != want.Decision {
		t.Errorf("row: %+v %v", row, err)
	}
	if diff := cmp.Diff([]string{"dispatch dock"}, f.disp.called()); diff != "" {
		t.Errorf("spoke calls (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"dock loops/" + wp.ID}, fc.reserved); diff != "" {
		t.Errorf("reservations (-want +got):\n%s", diff)
	}
	// A pinned submit is not placed and keeps no decision.
	w = f.do(t, req{method: "POST", path: "/api/pods", token: "tok-admin", body: `{"cluster":"wharf","image":"busybox"}`})
	if wp := workPodOf(t, w); w.Code != http.StatusCreated || wp.Cluster != "wharf" || wp.Placement != nil {
		t.Errorf("pinned: %d %+v", w.Code, wp)
	}
}

// Nothing fits now: the pod waits on the listed spoke with capacity for
// it, or, strict, is refused with 409 naming every spoke's reason, and
// nothing is recorded or dispatched.
func TestSubmitPlacementWhenNothingFits(t *testing.T) {
	f, _ := placementFixture(t)
	w := f.do(t, req{method: "POST", path: "/api/pods", token: "tok-admin", body: `{"clusters":["wharf"],"image":"busybox"}`})
	wp := workPodOf(t, w)
	if w.Code != http.StatusCreated || wp.Cluster != "wharf" || wp.Placement == nil || !wp.Placement.Waits {
		t.Fatalf("preference wharf: %d %+v", w.Code, wp.Placement)
	}
	if got := wp.Placement.Decision; got != "wharf: 1 of 4 nvidia.com/gpu free (needs 2); dock: not in the preference list" {
		t.Errorf("decision %q", got)
	}
	rows := f.rowCount(t)
	w = f.do(t, req{method: "POST", path: "/api/pods", token: "tok-admin", body: `{"clusters":["wharf"],"placement":"strict","image":"busybox"}`})
	if w.Code != http.StatusConflict || !strings.Contains(w.Body.String(), "wharf: 1 of 4 nvidia.com/gpu free (needs 2)") {
		t.Errorf("strict: %d %s", w.Code, w.Body)
	}
	if n := f.rowCount(t); n != rows {
		t.Errorf("strict refusal recorded a row: %d rows, want %d", n, rows)
	}
	if diff := cmp.Diff([]string{"dispatch wharf"}, f.disp.called()); diff != "" {
		t.Errorf("spoke calls (-want +got):\n%s", diff)
	}
}

// Bad placement input gets the request's own errors, naming the field.
func TestSubmitPlacementRefusals(t *testing.T) {
	f, _ := placementFixture(t)
	tests := []struct {
		name, token, body string
		code              int
		want              string
	}{
		{"unknown listed cluster", "tok-admin", `{"clusters":["pier"],"image":"busybox"}`, http.StatusBadRequest, `clusters: \"pier\": no such cluster (known: wharf, dock)`},
		{"cluster and clusters", "tok-admin", `{"cluster":"wharf","clusters":["dock"],"image":"busybox"}`, http.StatusBadRequest, "clusters"},
		{"unknown placement", "tok-admin", `{"cluster":"auto","placement":"loose","image":"busybox"}`, http.StatusBadRequest, "placement"},
		{"unknown class", "tok-admin", `{"cluster":"auto","class":"nope","image":"busybox"}`, http.StatusUnprocessableEntity, `no class \"nope\"`},
		{"bad image is the request's 400, not a 409", "tok-admin", `{"cluster":"auto","image":"BAD IMAGE"}`, http.StatusBadRequest, "image"},
		{"strict for a pinned cluster", "tok-admin", `{"cluster":"wharf","placement":"strict","image":"busybox"}`, http.StatusBadRequest, "strict means nothing for a pod pinned to cluster wharf"},
		{"strict for the named default cluster", "tok-admin", `{"placement":"strict","image":"busybox"}`, http.StatusBadRequest, "goes to the default cluster wharf"},
		{"may create nowhere", "tok-viewer", `{"cluster":"auto","image":"busybox"}`, http.StatusForbidden, "you may not create work pods on any cluster"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rows := f.rowCount(t)
			w := f.do(t, req{method: "POST", path: "/api/pods", token: tt.token, body: tt.body})
			if w.Code != tt.code || !strings.Contains(w.Body.String(), tt.want) {
				t.Errorf("%d %s; want %d containing %q", w.Code, w.Body, tt.code, tt.want)
			}
			if n := f.rowCount(t); n != rows {
				t.Errorf("recorded a row")
			}
		})
	}
}

// A keyed auto submit sent again is the same request: replayed, though a
// placement made now could choose otherwise.
func TestSubmitAutoReplay(t *testing.T) {
	f, fc := placementFixture(t)
	first := f.submitKeyed(t, "tok-admin", "auto-1", `{"cluster":"auto","image":"busybox"}`)
	fc.verdicts["dock"] = capacity.Verdict{Fits: false, Reason: "0 of 16 nvidia.com/gpu free (needs 2)", Resource: "nvidia.com/gpu", Total: 16}
	fc.verdicts["wharf"] = capacity.Verdict{Fits: true, Resource: "nvidia.com/gpu", Free: 4, Total: 4}
	again := f.submitKeyed(t, "tok-admin", "auto-1", `{"image":"busybox","cluster":"auto"}`)
	if first.Code != http.StatusCreated || again.Code != http.StatusCreated || again.Header().Get(apiv1.ReplayedHeader) != "true" {
		t.Fatalf("first %d, again %d %q %s", first.Code, again.Code, again.Header().Get(apiv1.ReplayedHeader), again.Body)
	}
	if a, b := workPodOf(t, first), workPodOf(t, again); a.ID != b.ID || b.Cluster != "dock" {
		t.Errorf("replay answered %s on %s, want %s on dock", b.ID, b.Cluster, a.ID)
	}
	if diff := cmp.Diff([]string{"dispatch dock"}, f.disp.called()); diff != "" {
		t.Errorf("spoke calls (-want +got):\n%s", diff)
	}
	// The replay's own placement (on wharf now) reserved capacity for a pod
	// it never sent: given back; the first pod's stays until its watch.
	if len(fc.reserved) != 2 || !strings.HasPrefix(fc.reserved[1], "wharf ") || !cmp.Equal(fc.released, fc.reserved[1:]) {
		t.Errorf("reserved %v, released %v; want the replay's wharf reservation released", fc.reserved, fc.released)
	}
}

// GET /api/capacity shows each cluster's view, and with ?class whether a
// pod of it fits; an unknown class is 400.
func TestCapacityView(t *testing.T) {
	f, fc := placementFixture(t)
	fc.sums = map[string]capacity.Summary{"wharf": {Synced: true, Nodes: 2,
		GPUs:      []capacity.GPUs{{Product: "NVIDIA-A100", Nodes: 1, Free: 1, Total: 4}},
		CPUMillis: capacity.Amount{Free: 3500, Total: 8000}, MemoryBytes: capacity.Amount{Free: 8 << 30, Total: 32 << 30}}}
	w := f.do(t, req{path: "/api/capacity?class=standard", token: "tok-admin"})
	var got []apiv1.ClusterCapacity
	if err := json.Unmarshal(w.Body.Bytes(), &got); w.Code != http.StatusOK || err != nil {
		t.Fatalf("%d %s %v", w.Code, w.Body, err)
	}
	no, yes := false, true
	want := []apiv1.ClusterCapacity{
		{Cluster: "wharf", View: true, Synced: true, GPUs: []apiv1.GPUProduct{{Product: "NVIDIA-A100", Free: 1, Total: 4}},
			CPU: &apiv1.Amount{Free: "3500m", Total: "8"}, Memory: &apiv1.Amount{Free: "8Gi", Total: "32Gi"},
			Fits: &no, Reason: "1 of 4 nvidia.com/gpu free (needs 2)"},
		{Cluster: "dock", Fits: &yes},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("capacity (-want +got):\n%s", diff)
	}
	if w := f.do(t, req{path: "/api/capacity?class=nope", token: "tok-admin"}); w.Code != http.StatusBadRequest {
		t.Errorf("unknown class: %d %s", w.Code, w.Body)
	}
}

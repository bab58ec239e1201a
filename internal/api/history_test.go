package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"crucible.dev/crucible/internal/api/apiv1"
	podevents "crucible.dev/crucible/internal/events"
	"crucible.dev/crucible/internal/store"
)

var errUnreadable = errors.New("history unreadable")

const noGPU = "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) had untolerated taint {nvidia.com/gpu: present}."

// GET /api/pods/{pod} shows why a live pod waits and its history with
// times; list views show the wait but no history; once the pod is
// cancelled the wait is gone and the history ends with the cancel.
func TestGetShowsWaitingAndHistory(t *testing.T) {
	f := newFixture(t)
	f.row(t, "p1", "wharf")
	waited, _, err := f.st.ObservePod(t.Context(), "p1", store.Observation{Waiting: &store.Waiting{Reason: "Unschedulable", Message: noGPU}})
	if err != nil {
		t.Fatal(err)
	}
	var got apiv1.WorkPod
	w := f.do(t, req{path: "/api/pods/p1", token: "tok-viewer"})
	if w.Code != http.StatusOK {
		t.Fatalf("get: %d %s", w.Code, w.Body)
	}
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&apiv1.Waiting{Reason: "Unschedulable", Message: noGPU, Since: waited.UpdatedAt}, got.Waiting); diff != "" {
		t.Errorf("waiting (-want +got):\n%s", diff)
	}
	created, _ := f.st.GetWorkPod(t.Context(), "p1")
	wantHistory := []apiv1.HistoryEntry{
		{At: created.CreatedAt, Event: store.EventState, State: store.StateRunning},
		{At: waited.UpdatedAt, Event: store.EventWaiting, State: store.StateRunning, Reason: "Unschedulable", Message: noGPU},
	}
	if diff := cmp.Diff(wantHistory, got.History); diff != "" {
		t.Errorf("history (-want +got):\n%s", diff)
	}
	var fields struct {
		History []map[string]any `json:"history"`
		Waiting map[string]any   `json:"waiting"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &fields); err != nil {
		t.Fatal(err)
	}
	if len(fields.History) != 2 || fields.History[1]["at"] == nil || fields.History[1]["event"] != "waiting" || fields.Waiting["since"] == nil {
		t.Errorf("body does not spell history and waiting as documented: %s", w.Body)
	}

	list := f.do(t, req{path: "/api/pods", token: "tok-admin"})
	var rows []map[string]json.RawMessage
	if err := json.Unmarshal(list.Body.Bytes(), &rows); err != nil || len(rows) != 1 {
		t.Fatalf("list: %d %s (%v)", list.Code, list.Body, err)
	}
	if _, ok := rows[0]["history"]; ok || !strings.Contains(string(rows[0]["waiting"]), "Unschedulable") {
		t.Errorf("list row %s; want the wait and no history", list.Body)
	}

	if c := f.do(t, req{method: http.MethodPost, path: "/api/pods/p1/cancel", token: "tok-admin"}); c.Code != http.StatusOK {
		t.Fatalf("cancel: %d %s", c.Code, c.Body)
	}
	got = apiv1.WorkPod{}
	if err := json.Unmarshal(f.do(t, req{path: "/api/pods/p1", token: "tok-viewer"}).Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.Waiting != nil {
		t.Errorf("a cancelled pod still waits: %+v", got.Waiting)
	}
	if n := len(got.History); n != 3 || got.History[2].State != store.StateCancelled || got.History[2].Reason != "cancelled through the API" {
		t.Errorf("history after the cancel: %+v, want it to end with the cancel", got.History)
	}
}

// A store that cannot read the history fails the get rather than show a
// pod without one.
func TestGetHistoryFailing(t *testing.T) {
	f := newFixture(t)
	f.row(t, "p1", "wharf")
	f.st.Fail(errUnreadable, "PodHistory")
	if w := f.do(t, req{path: "/api/pods/p1", token: "tok-viewer"}); w.Code != http.StatusInternalServerError {
		t.Errorf("get with an unreadable history: %d %s, want 500", w.Code, w.Body)
	}
}

// The event stream carries a pod's wait as it starts, without history.
func TestEventsShowWaiting(t *testing.T) {
	f := newFixture(t)
	bus := newTestBus(t)
	f.srv.Events = bus
	f.srv.Store = podevents.Store{Store: f.st, Pub: bus}
	srv := httptest.NewServer(f.mux)
	t.Cleanup(srv.Close)
	f.row(t, "p1", "wharf")
	_, next := openEvents(t, srv, "/api/events", "tok-viewer", "")
	if _, _, err := f.srv.Store.(podevents.Store).ObservePod(t.Context(), "p1", store.Observation{Waiting: &store.Waiting{Reason: "Unschedulable", Message: noGPU}}); err != nil {
		t.Fatal(err)
	}
	ev := next()
	var wp apiv1.WorkPod
	if err := json.Unmarshal([]byte(ev.data), &wp); err != nil {
		t.Fatal(err)
	}
	if wp.ID != "p1" || wp.Waiting == nil || wp.Waiting.Message != noGPU || wp.History != nil {
		t.Errorf("event %s, want p1 waiting Unschedulable without history", ev.data)
	}
}

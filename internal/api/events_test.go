package api

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/apiauth"
	podevents "crucible.dev/crucible/internal/events"
	"crucible.dev/crucible/internal/store"
)

// sseEvent is one parsed server-sent event.
type sseEvent struct{ name, id, data string }

// openEvents starts GET /api/events on a real server and returns a reader
// of its events.
func openEvents(t *testing.T, srv *httptest.Server, path, token, lastID string) (*http.Response, func() sseEvent) {
	t.Helper()
	r, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Accept", "text/event-stream")
	r.Header.Set("Authorization", "Bearer "+token)
	if lastID != "" {
		r.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := srv.Client().Do(r)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	sc := bufio.NewScanner(resp.Body)
	evs := make(chan sseEvent, 16)
	go func() {
		var ev sseEvent
		for sc.Scan() {
			field, value, _ := strings.Cut(sc.Text(), ": ")
			switch field {
			case "event":
				ev.name = value
			case "id":
				ev.id = value
			case "data":
				ev.data = value
			case "":
				if ev.name != "" {
					evs <- ev
				}
				ev = sseEvent{}
			}
		}
		close(evs)
	}()
	return resp, func() sseEvent {
		t.Helper()
		select {
		case ev, ok := <-evs:
			if !ok {
				t.Fatal("the event stream ended")
			}
			return ev
		case <-time.After(10 * time.Second):
			t.Fatal("no event within 10s")
		}
		return sseEvent{}
	}
}

func TestEventsStream(t *testing.T) {
	f := newFixture(t)
	bus := newTestBus(t)
	f.srv.Events = bus
	f.srv.Store = podevents.Store{Store: f.st, Pub: bus}
	srv := httptest.NewServer(f.mux)
	t.Cleanup(srv.Close)

	resp, next := openEvents(t, srv, "/api/events?cluster=wharf", "tok-viewer", "")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("answer %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if got := f.authz.lastAsked(); got != "viewer list wharf" {
		t.Fatalf("authorized as %q", got)
	}
	f.row(t, "p-dock", "dock") // filtered out by ?cluster=wharf
	f.row(t, "p-wharf", "wharf")
	if _, err := f.srv.Store.UpdateWorkPod(t.Context(), "p-wharf", func(p *store.WorkPod) error {
		p.State = store.StateSucceeded
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var got []string
	var firstID string
	for range 2 {
		ev := next()
		var wp apiv1.WorkPod
		if err := json.Unmarshal([]byte(ev.data), &wp); err != nil {
			t.Fatalf("event %+v: %v", ev, err)
		}
		if firstID == "" {
			firstID = ev.id
		}
		got = append(got, ev.name+" "+wp.ID+" "+string(wp.State))
	}
	if diff := cmp.Diff([]string{"pod p-wharf running", "pod p-wharf succeeded"}, got); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}

	// Resuming after the first replays the rest.
	_, resumed := openEvents(t, srv, "/api/events?cluster=wharf", "tok-viewer", firstID)
	if ev := resumed(); ev.name != "pod" || !strings.Contains(ev.data, `"succeeded"`) {
		t.Fatalf("resumed event %+v", ev)
	}
	// An id from another process: reset, so the client re-lists.
	_, reset := openEvents(t, srv, "/api/events", "tok-viewer", "otherprocess.5")
	if ev := reset(); ev.name != "reset" {
		t.Fatalf("event after a foreign id: %+v", ev)
	}
}

func TestEventsRefusals(t *testing.T) {
	f := newFixture(t)
	stream := map[string]string{"Accept": "text/event-stream"}
	tests := []struct {
		name     string
		req      req
		wantCode int
	}{
		{"unauthenticated", req{path: "/api/events", header: stream}, 401},
		{"no list right", req{path: "/api/events", token: "tok-dock", header: stream}, 403},
		{"no such cluster", req{path: "/api/events?cluster=nope", token: "tok-viewer", header: stream}, 403},
		{"bad kind", req{path: "/api/events?kind=%3Cscript%3E", token: "tok-viewer", header: stream}, 400},
		{"not a stream", req{path: "/api/events", token: "tok-viewer"}, 406},
		{"oversized Last-Event-ID", req{path: "/api/events", token: "tok-viewer",
			header: map[string]string{"Accept": "text/event-stream", "Last-Event-ID": strings.Repeat("9", 65)}}, 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if w := f.do(t, tt.req); w.Code != tt.wantCode {
				t.Fatalf("code %d, want %d: %s", w.Code, tt.wantCode, w.Body.String())
			}
		})
	}
}

func TestWhoAmI(t *testing.T) {
	f := newFixture(t)
	viewer := apiv1.Rights{List: true, Get: true, Log: true, Artifacts: true}
	tests := []struct {
		name     string
		token    string
		wantCode int
		want     apiv1.WhoAmI
	}{
		{"viewer", "tok-viewer", 200, apiv1.WhoAmI{User: "viewer", Auth: "kubernetes", All: apiv1.Rights{List: true},
			Clusters: map[string]apiv1.Rights{"wharf": viewer, "dock": {}}}},
		{"submitter", "tok-submitter", 200, apiv1.WhoAmI{User: "submitter", Auth: "kubernetes", All: apiv1.Rights{Create: true},
			Clusters: map[string]apiv1.Rights{"wharf": {Create: true}, "dock": {Create: true}}}},
		{"nobody", "tok-nobody", 200, apiv1.WhoAmI{User: "nobody", Auth: "kubernetes", Clusters: map[string]apiv1.Rights{"wharf": {}, "dock": {}}}},
		{"authorizer down is 503, never a no", "tok-flaky", 503, apiv1.WhoAmI{}},
		{"unauthenticated", "", 401, apiv1.WhoAmI{}},
		{"forged", "forged", 401, apiv1.WhoAmI{}},
	}
	f.srv.AuthMode = "kubernetes"
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := f.do(t, req{path: "/api/whoami", token: tt.token})
			if w.Code != tt.wantCode {
				t.Fatalf("code %d, want %d: %s", w.Code, tt.wantCode, w.Body.String())
			}
			if tt.wantCode != 200 {
				return
			}
			var got apiv1.WhoAmI
			if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Fatalf("whoami (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWhoAmIAuthNone(t *testing.T) {
	f := newFixture(t)
	f.srv.Authn, f.srv.Authz, f.srv.AuthMode = apiauth.Anonymous{}, apiauth.AllowAll{}, ""
	w := f.do(t, req{path: "/api/whoami"})
	var got apiv1.WhoAmI
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || w.Code != 200 {
		t.Fatalf("code %d %s: %v", w.Code, w.Body.String(), err)
	}
	all := apiv1.Rights{Create: true, List: true, Get: true, Delete: true, Log: true, Artifacts: true}
	want := apiv1.WhoAmI{User: "crucible:anonymous", Auth: "none", All: all, Clusters: map[string]apiv1.Rights{"wharf": all, "dock": all}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("whoami (-want +got):\n%s", diff)
	}
}

package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/apiauth"
	podevents "crucible.dev/crucible/internal/events"
	"crucible.dev/crucible/internal/metrics"
	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/store"
)

// newTestBus is an event bus with package profile's default [events] bounds.
func newTestBus(t *testing.T) *podevents.Bus {
	t.Helper()
	b, err := podevents.NewBus(profile.Default().Events)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// openSSE opens path as the caller of token with Accept: text/event-stream
// and returns the answer and, for a 200, its events, closed when the
// stream ends. The stream stays open until ctx ends. Any other answer's
// body is left unread for the caller, and its channel is closed: a reader
// started on it would race the caller for the error message.
func openSSE(t *testing.T, ctx context.Context, url, path, token string) (*http.Response, <-chan sseEvent) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+path, nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	evs := make(chan sseEvent, 64)
	if resp.StatusCode != http.StatusOK {
		close(evs)
		return resp, evs
	}
	go func() {
		defer close(evs)
		sc := bufio.NewScanner(resp.Body)
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
	}()
	return resp, evs
}

// nextEvent is the stream's next event; ok is false when it ended.
func nextEvent(t *testing.T, evs <-chan sseEvent) (ev sseEvent, ok bool) {
	t.Helper()
	select {
	case ev, ok = <-evs:
		return ev, ok
	case <-time.After(10 * time.Second):
		t.Fatal("no event and no end of the stream within 10s")
	}
	return sseEvent{}, false
}

// R-B1: event streams are capped per caller and in all ([events]
// max_streams_per_identity, max_streams), as live logs are: one past a cap
// is 429 with Retry-After naming the cap, a stream that ends frees its
// slot, and each refusal is counted under its budget and logged once per
// caller and minute.
func TestEventStreamCaps(t *testing.T) {
	f := newFixture(t)
	f.srv.Profile.Load().Events.MaxStreams, f.srv.Profile.Load().Events.MaxStreamsPerIdentity = 3, 2
	f.srv.Authn = fakeAuthn{"tok-alice": "alice", "tok-bob": "bob", "tok-carol": "carol"}
	f.srv.Authz = apiauth.AllowAll{}
	var logs lockedBuffer
	f.srv.Log = slog.New(slog.NewTextHandler(&logs, nil))
	srv := httptest.NewServer(f.mux)
	t.Cleanup(srv.Close)
	refusals := func(budget string) float64 { return testutil.ToFloat64(metrics.BudgetRefusals.WithLabelValues(budget)) }
	perIdentity, all := refusals(budgetEventsPerIdentity), refusals(budgetEvents)

	type answer struct {
		Code       int
		RetryAfter string
		Body       string
	}
	get := func(ctx context.Context, token string) answer {
		resp, _ := openSSE(t, ctx, srv.URL, "/api/events", token)
		a := answer{Code: resp.StatusCode, RetryAfter: resp.Header.Get("Retry-After")}
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			a.Body = errorMessage(b)
		}
		return a
	}
	first, closeFirst := context.WithCancel(t.Context())
	defer closeFirst()
	got := []answer{
		get(first, "tok-alice"),
		get(t.Context(), "tok-alice"),
		get(t.Context(), "tok-alice"),
		get(t.Context(), "tok-alice"),
		get(t.Context(), "tok-bob"),
		get(t.Context(), "tok-carol"),
	}
	ok := answer{Code: 200}
	aliceFull := answer{429, "30", "too many event streams open for alice: [events] max_streams_per_identity is 2"}
	allFull := answer{429, "30", "too many event streams open: [events] max_streams is 3"}
	if diff := cmp.Diff([]answer{ok, ok, aliceFull, aliceFull, ok, allFull}, got); diff != "" {
		t.Errorf("answers (-want +got):\n%s", diff)
	}
	if d := refusals(budgetEventsPerIdentity) - perIdentity; d != 2 {
		t.Errorf("per-identity refusals counted %v, want 2", d)
	}
	if d := refusals(budgetEvents) - all; d != 1 {
		t.Errorf("refusals of the cap in all counted %v, want 1", d)
	}
	if n := logs.lines("budget=events_streams_per_identity caller=alice"); n != 1 {
		t.Errorf("alice's two refusals logged %d times within the minute, want once", n)
	}
	closeFirst()
	waitUntil(t, "the first stream's slot to be freed", func() bool {
		f.srv.budgets.mu.Lock()
		defer f.srv.budgets.mu.Unlock()
		return f.srv.budgets.events.open == 2
	})
	if a := get(t.Context(), "tok-carol"); a != ok {
		t.Errorf("carol after a stream ended: %+v, want 200", a)
	}
	if n := logs.lines("tok-"); n != 0 {
		t.Errorf("a token appears %d times in the log", n)
	}
}

// errorMessage is the "error" of an API error body.
func errorMessage(body []byte) string {
	var e struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil {
		return string(body)
	}
	return e.Error
}

// lockedAuthn is fakeAuthn behind a lock, so a test can take a token away
// while streams re-check it.
type lockedAuthn struct {
	mu    sync.Mutex
	users fakeAuthn
}

func (l *lockedAuthn) Authenticate(r *http.Request) (apiauth.Identity, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.users.Authenticate(r)
}

func (l *lockedAuthn) revoke(token string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.users, token)
}

// outageAuthz is fakeAuthz behind a hub that may be down (every answer
// ErrUnavailable); it counts the questions.
type outageAuthz struct {
	*fakeAuthz
	down  atomic.Bool
	calls atomic.Int64
}

func (o *outageAuthz) Authorize(ctx context.Context, id apiauth.Identity, a apiauth.Attributes) error {
	o.calls.Add(1)
	if o.down.Load() {
		return fmt.Errorf("%w: hub unreachable", apiauth.ErrUnavailable)
	}
	return o.fakeAuthz.Authorize(ctx, id, a)
}

func (o *outageAuthz) revoke(grant string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.allowed, grant)
}

// R-B1: a live log and an event stream check their caller again every [api]
// stream_recheck. While the hub cannot answer the stream goes on (changes
// keep arriving); once the caller's permission or credentials are gone it
// ends with an error event saying which, and its handler returns (its
// slot is freed).
func TestStreamsEndWhenCallerLosesAccess(t *testing.T) {
	const revokedList = "permission revoked: forbidden: viewer may not list workpods.crucible.dev wharf"
	const revokedLog = "permission revoked: forbidden: viewer may not get workpods/log.crucible.dev wharf"
	const expired = "credentials expired or revoked: unauthenticated: the hub did not accept the token"
	tests := []struct {
		name, path string
		revoke     func(*lockedAuthn, *outageAuthz)
		want       string
	}{
		{"events: binding deleted", "/api/events?cluster=wharf", func(_ *lockedAuthn, z *outageAuthz) { z.revoke("viewer list wharf") }, revokedList},
		{"events: token revoked", "/api/events?cluster=wharf", func(n *lockedAuthn, _ *outageAuthz) { n.revoke("tok-viewer") }, expired},
		{"live log: binding deleted", "/api/pods/turn-quiet/logs", func(_ *lockedAuthn, z *outageAuthz) { z.revoke("viewer get/log wharf") }, revokedLog},
		{"live log: token revoked", "/api/pods/turn-quiet/logs", func(n *lockedAuthn, _ *outageAuthz) { n.revoke("tok-viewer") }, expired},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, srv := newLogServer(t, quietSource{})
			s.Profile = profile.NewCurrent(testProfile(profile.ClusterEntry{Name: "wharf", LoopNamespace: "loops"}))
			s.Profile.Load().API.StreamRecheck.Duration = 10 * time.Millisecond
			bus := newTestBus(t)
			s.Events, s.Store = bus, podevents.Store{Store: s.Store.(store.Store), Pub: bus}
			authn := &lockedAuthn{users: fakeAuthn{"tok-viewer": "viewer"}}
			authz := &outageAuthz{fakeAuthz: newFixture(t).authz}
			s.Authn, s.Authz = authn, authz
			addRow(t, s, "turn-quiet", store.StateRunning, 0, "")

			resp, evs := openSSE(t, t.Context(), srv.URL, tt.path, "tok-viewer")
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("open %s: %d", tt.path, resp.StatusCode)
			}
			// The hub goes down for a few checks: the stream goes on.
			authz.down.Store(true)
			asked := authz.calls.Load()
			waitUntil(t, "three checks while the hub is down", func() bool { return authz.calls.Load() >= asked+3 })
			authz.down.Store(false)
			if strings.HasPrefix(tt.path, "/api/events") {
				addRow(t, s, "turn-after", store.StateRunning, 0, "")
				if ev, ok := nextEvent(t, evs); !ok || ev.name != "pod" || !strings.Contains(ev.data, "turn-after") {
					t.Fatalf("after the outage: %+v (open %v), want the next change", ev, ok)
				}
			}

			tt.revoke(authn, authz)
			var got []string
			for ev, ok := nextEvent(t, evs); ok; ev, ok = nextEvent(t, evs) {
				if ev.name != "pod" { // changes published before the revocation may still come
					got = append(got, ev.name+" "+ev.data)
				}
			}
			if diff := cmp.Diff([]string{"error " + mustJSON(t, apiv1.ErrorEvent{Error: tt.want})}, got); diff != "" {
				t.Errorf("events after the revocation, to the end of the stream (-want +got):\n%s", diff)
			}
			waitUntil(t, "the stream's slot to be freed", func() bool {
				s.budgets.mu.Lock()
				defer s.budgets.mu.Unlock()
				return s.budgets.events.open == 0 && s.budgets.viewers.open == 0
			})
		})
	}
}

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
	"crucible.dev/crucible/internal/render"
)

// Issue 23 (R-B1) on a stack of its own (it restarts the controller with
// `[api] auth = "kubernetes"`): a hub user watching GET /api/events and a
// live log loses both streams, each with an `error` event saying why, once
// its RoleBinding is deleted or its token stops being valid on the hub
// ([api] stream_recheck = 1s; the test waits for the events, not for a
// time); and the cap+1-th event stream of one caller is 429 with
// Retry-After, counted under its budget.
func TestStreamsRecheckTheirCallerAndAreCapped(t *testing.T) {
	t.Parallel() // a stack of its own: see doc.go
	const perIdentity = 2
	s := ownStack(t, devstack.Options{
		Crucible: devstacktest.BuildCrucible, Spokes: []devstack.SpokeOptions{{Name: "wharf"}},
		MirrorTTL: time.Second, MirrorMaxStale: 8 * time.Second,
	})
	baseProfile, err := os.ReadFile(s.Federation.ProfileFile)
	if err != nil {
		t.Fatal(err)
	}
	applyHub(t, s, render.HubRBAC(devstack.HubNamespace, devstack.HubServiceAccount)...)
	for _, name := range []string{"watcher", "holder", "capped", "submitter"} {
		hubServiceAccount(t, s, name)
	}
	for _, name := range []string{"watcher", "holder", "capped"} {
		grant(t, s, name, render.HubViewerName, saSubject(name))
	}
	grant(t, s, "submitter", render.HubSubmitterName, saSubject("submitter"))
	withAPISection(t, s, string(baseProfile), `auth = "kubernetes"
token_accept_ttl = "1s"
token_negative_ttl = "1s"
access_allow_ttl = "1s"
access_deny_ttl = "1s"
stream_recheck = "1s"

[events]
max_streams_per_identity = `+strconv.Itoa(perIdentity)+"\n")
	watcher := caller{token: hubToken(t, s, "watcher", devstack.Issuer)}
	capped := caller{token: hubToken(t, s, "capped", devstack.Issuer)}
	submitter := caller{token: hubToken(t, s, "submitter", devstack.Issuer)}
	// holder's token is bound to a Secret: deleting it invalidates the
	// token on the hub, as revoking a credential does.
	secret, err := s.Hub.Client.CoreV1().Secrets(devstack.HubNamespace).Create(t.Context(),
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "holder-credential"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	holderToken, err := s.Hub.TokenRequest(t.Context(), devstack.HubNamespace, "holder", []string{devstack.Issuer}, 600,
		&authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: secret.Name, UID: secret.UID})
	if err != nil {
		t.Fatal(err)
	}
	holder := caller{token: holderToken}

	var wp apiv1.WorkPod
	a := submitter.call(t, s, http.MethodPost, "/api/pods", apiv1.SubmitRequest{Image: "busybox",
		Command: []string{"sh", "-c", "i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.2; done"}}).want(t, "submit a ticking pod", 201)
	if err := json.Unmarshal(a.body, &wp); err != nil {
		t.Fatal(err)
	}
	waitRunningAs(t, s, watcher, wp.ID)

	t.Run("per-identity cap", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		before := controllerMetricValue(t, s, `crucible_budget_refusals_total{budget="events_streams_per_identity"}`)
		for i := range perIdentity {
			if code, _, _ := capped.stream(t, ctx, s, "/api/events"); code != http.StatusOK {
				t.Fatalf("event stream %d of %d: %d, want 200", i+1, perIdentity, code)
			}
		}
		code, header, body := capped.stream(t, ctx, s, "/api/events")
		if code != http.StatusTooManyRequests || header.Get("Retry-After") == "" || !strings.Contains(body, "[events] max_streams_per_identity is "+strconv.Itoa(perIdentity)) {
			t.Fatalf("event stream %d: %d Retry-After %q %s; want 429 with Retry-After naming the cap", perIdentity+1, code, header.Get("Retry-After"), body)
		}
		if got := controllerMetricValue(t, s, `crucible_budget_refusals_total{budget="events_streams_per_identity"}`) - before; got != 1 {
			t.Errorf(`crucible_budget_refusals_total{budget="events_streams_per_identity"} grew by %v, want 1`, got)
		}
		// Another caller is not held to capped's cap.
		if code, _, _ := holder.stream(t, ctx, s, "/api/events"); code != http.StatusOK {
			t.Errorf("holder's event stream while capped is at its cap: %d, want 200", code)
		}
	})

	t.Run("RoleBinding deleted", func(t *testing.T) {
		events, logs := watcher.openBoth(t, s, wp.ID)
		if err := s.Hub.Client.RbacV1().RoleBindings(devstack.HubNamespace).Delete(t.Context(), "watcher", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		for name, evs := range map[string]<-chan streamEvent{"events": events, "live log": logs} {
			if got := lastEvent(t, evs); got.name != "error" || !strings.Contains(got.data, "permission revoked") {
				t.Errorf("%s stream of a caller whose RoleBinding was deleted ended with %+v, want an error event saying the permission was revoked", name, got)
			}
		}
	})

	t.Run("token invalidated", func(t *testing.T) {
		events, logs := holder.openBoth(t, s, wp.ID)
		if err := s.Hub.Client.CoreV1().Secrets(devstack.HubNamespace).Delete(t.Context(), secret.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		for name, evs := range map[string]<-chan streamEvent{"events": events, "live log": logs} {
			if got := lastEvent(t, evs); got.name != "error" || !strings.Contains(got.data, "credentials expired or revoked") {
				t.Errorf("%s stream of a caller whose token was invalidated ended with %+v, want an error event saying the credentials are gone", name, got)
			}
		}
	})
}

// streamEvent is one server-sent event.
type streamEvent struct{ name, data string }

// stream opens path as an SSE stream as c, for as long as ctx lasts: the
// status, headers, and for a 200 its events (closed when the stream
// ends), else its body.
func (c caller) stream(t *testing.T, ctx context.Context, s *devstack.Stack, path string) (int, http.Header, string) {
	code, header, body, _ := c.streamEvents(t, ctx, s, path)
	return code, header, body
}

func (c caller) streamEvents(t *testing.T, ctx context.Context, s *devstack.Stack, path string) (int, http.Header, string, <-chan streamEvent) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.Federation.ControllerInternalURL+path, nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := sseClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b), nil
	}
	evs := make(chan streamEvent, 1024)
	go func() {
		defer close(evs)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		var ev streamEvent
		for sc.Scan() {
			field, value, _ := strings.Cut(sc.Text(), ": ")
			switch field {
			case "event":
				ev.name = value
			case "data":
				ev.data = value
			case "":
				if ev.name != "" {
					select {
					case evs <- ev:
					case <-ctx.Done():
						return
					}
				}
				ev = streamEvent{}
			}
		}
	}()
	return resp.StatusCode, resp.Header, "", evs
}

// openBoth opens /api/events and pod's live log as c and returns their
// events once the log has sent a line (both streams are established).
func (c caller) openBoth(t *testing.T, s *devstack.Stack, pod string) (events, logs <-chan streamEvent) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	code, _, body, events := c.streamEvents(t, ctx, s, "/api/events")
	if code != http.StatusOK {
		t.Fatalf("event stream: %d %s", code, body)
	}
	code, _, body, logs = c.streamEvents(t, ctx, s, "/api/pods/"+pod+"/logs")
	if code != http.StatusOK {
		t.Fatalf("live log: %d %s", code, body)
	}
	select {
	case ev := <-logs:
		if ev.name != "line" {
			t.Fatalf("live log's first event: %+v, want a line", ev)
		}
	case <-time.After(time.Minute):
		t.Fatal("no line of the ticking pod's log within a minute")
	}
	return events, logs
}

// lastEvent reads evs to its end and returns its last event but a line or
// a pod: how the stream ended. A stream that never ends fails the test
// after two minutes.
func lastEvent(t *testing.T, evs <-chan streamEvent) streamEvent {
	t.Helper()
	var last streamEvent
	deadline := time.After(2 * time.Minute)
	for {
		select {
		case ev, ok := <-evs:
			if !ok {
				return last
			}
			if ev.name != "line" && ev.name != "pod" {
				last = ev
			}
		case <-deadline:
			t.Fatalf("the stream did not end within two minutes (last event %+v)", last)
		}
	}
}

// waitRunningAs polls pod id as c until it runs.
func waitRunningAs(t *testing.T, s *devstack.Stack, c caller, id string) {
	t.Helper()
	var wp apiv1.WorkPod
	err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		a := c.call(t, s, http.MethodGet, "/api/pods/"+id, nil).want(t, "get", 200)
		if err := json.Unmarshal(a.body, &wp); err != nil {
			return false, err
		}
		return wp.State == "running", nil
	})
	if err != nil {
		t.Fatalf("work pod %s: %s, want running (%v)", id, wp.State, err)
	}
}

package api

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"crucible.dev/crucible/internal/apiauth"
	"crucible.dev/crucible/internal/store"
)

// logAuthFixture has a finished pod of wharf with its collected log, a pod
// upload, a controller-owned kind besides the log and a controller-recorded
// one of an ordinary name, and the user "artonly", who may read wharf's pods
// and artifacts but not their logs.
func logAuthFixture(t *testing.T) *fixture {
	t.Helper()
	f := newFixture(t)
	f.srv.Authn.(fakeAuthn)["tok-artonly"] = "artonly"
	for _, g := range []string{"artonly get wharf", "artonly get/artifacts wharf"} {
		f.authz.allowed[g] = true
	}
	addRow(t, f.srv, "p-done", store.StateSucceeded, 0, "the collected log\n")
	f.artifact(t, "p-done", "report", "pod bytes")
	f.artifactFrom(t, "p-done", "crucible-summary", "controller summary", store.SourceController)
	f.artifactFrom(t, "p-done", "digest", "controller digest", store.SourceController)
	return f
}

// TestLogNeedsLogPermissionByEveryRoute: the collected log (and every other
// artifact the controller owns) is read with workpods/log, whichever route
// asks for it; workpods/artifacts alone shows only what the pod uploaded.
func TestLogNeedsLogPermissionByEveryRoute(t *testing.T) {
	tests := []struct {
		name      string
		token     string
		path      string
		wantCode  int
		wantError string
		wantBody  string // for a 200 that is not the list
		wantKinds []string
		wantAsked string
	}{
		{name: "artifact log without workpods/log", token: "tok-artonly", path: "/api/pods/p-done/artifacts/log", wantCode: 403,
			wantError: "forbidden: artonly may not get workpods/log.crucible.dev wharf", wantAsked: "artonly get/log wharf"},
		{name: "reserved kind without workpods/log", token: "tok-artonly", path: "/api/pods/p-done/artifacts/crucible-summary", wantCode: 403,
			wantError: "forbidden: artonly may not get workpods/log.crucible.dev wharf", wantAsked: "artonly get/log wharf"},
		// Refused before the record is read: whether it exists is not shown.
		{name: "absent reserved kind without workpods/log", token: "tok-artonly", path: "/api/pods/p-done/artifacts/crucible-absent", wantCode: 403,
			wantError: "forbidden: artonly may not get workpods/log.crucible.dev wharf", wantAsked: "artonly get/log wharf"},
		{name: "controller-recorded kind without workpods/log", token: "tok-artonly", path: "/api/pods/p-done/artifacts/digest", wantCode: 403,
			wantError: "forbidden: artonly may not get workpods/log.crucible.dev wharf", wantAsked: "artonly get/log wharf"},
		{name: "logs route without workpods/log", token: "tok-artonly", path: "/api/pods/p-done/logs", wantCode: 403,
			wantError: "forbidden: artonly may not get workpods/log.crucible.dev wharf", wantAsked: "artonly get/log wharf"},
		{name: "list without workpods/log hides the controller's", token: "tok-artonly", path: "/api/pods/p-done/artifacts", wantCode: 200,
			wantKinds: []string{"report"}, wantAsked: "artonly get/log wharf"},
		{name: "pod upload without workpods/log", token: "tok-artonly", path: "/api/pods/p-done/artifacts/report", wantCode: 200,
			wantBody: "pod bytes", wantAsked: "artonly get/artifacts wharf"},
		{name: "artifact log with both", token: "tok-viewer", path: "/api/pods/p-done/artifacts/log", wantCode: 200,
			wantBody: "the collected log\n", wantAsked: "viewer get/log wharf"},
		{name: "controller-recorded kind with both", token: "tok-viewer", path: "/api/pods/p-done/artifacts/digest", wantCode: 200,
			wantBody: "controller digest", wantAsked: "viewer get/log wharf"},
		{name: "logs route with both", token: "tok-viewer", path: "/api/pods/p-done/logs", wantCode: 200,
			wantBody: "the collected log\n", wantAsked: "viewer get/log wharf"},
		{name: "list with both", token: "tok-viewer", path: "/api/pods/p-done/artifacts", wantCode: 200,
			wantKinds: []string{"crucible-summary", "digest", "log", "report"}, wantAsked: "viewer get/log wharf"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := logAuthFixture(t)
			w := f.do(t, req{path: tc.path, token: tc.token})
			if w.Code != tc.wantCode {
				t.Fatalf("code = %d, want %d; body %s", w.Code, tc.wantCode, w.Body)
			}
			switch {
			case tc.wantError != "":
				if got := errorOf(t, w); got != tc.wantError {
					t.Errorf("error = %q, want %q", got, tc.wantError)
				}
			case tc.wantKinds != nil:
				if diff := cmp.Diff(tc.wantKinds, kindsOf(t, w.Body.Bytes())); diff != "" {
					t.Errorf("listed kinds (-want +got):\n%s", diff)
				}
			default:
				if got := w.Body.String(); got != tc.wantBody {
					t.Errorf("body = %q, want %q", got, tc.wantBody)
				}
			}
			if got := f.authz.lastAsked(); got != tc.wantAsked {
				t.Errorf("last authorization = %q, want %q", got, tc.wantAsked)
			}
		})
	}
}

// TestArtifactListAsksOnceAndOnlyWhenNeeded: the list asks the authorizer
// about the log once per request, and not at all when the pod has nothing
// of the controller's to hide.
func TestArtifactListAsksOnceAndOnlyWhenNeeded(t *testing.T) {
	f := logAuthFixture(t)
	f.row(t, "p-uploads", "wharf")
	f.artifact(t, "p-uploads", "report", "pod bytes")
	for _, tc := range []struct {
		pod  string
		want []string
	}{
		{"p-done", []string{"artonly get/artifacts wharf", "artonly get/log wharf"}},
		{"p-uploads", []string{"artonly get/artifacts wharf"}},
	} {
		f.authz.mu.Lock()
		f.authz.asked = nil
		f.authz.mu.Unlock()
		if w := f.do(t, req{path: "/api/pods/" + tc.pod + "/artifacts", token: "tok-artonly"}); w.Code != 200 {
			t.Fatalf("%s: code %d; body %s", tc.pod, w.Code, w.Body)
		}
		f.authz.mu.Lock()
		got := f.authz.asked
		f.authz.mu.Unlock()
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s: authorizations asked (-want +got):\n%s", tc.pod, diff)
		}
	}
}

// TestArtifactListHubDownIsNotHiding: a hub that cannot say whether the
// caller may read the log makes the list 503, rather than a list that
// silently lacks the log.
func TestArtifactListHubDownIsNotHiding(t *testing.T) {
	f := logAuthFixture(t)
	f.srv.Authz = downForLog{f.authz}
	w := f.do(t, req{path: "/api/pods/p-done/artifacts", token: "tok-artonly"})
	if w.Code != 503 {
		t.Fatalf("code = %d, want 503; body %s", w.Code, w.Body)
	}
	if got := errorOf(t, w); got != "cannot check your identity or permissions right now; retry later" {
		t.Errorf("error = %q", got)
	}
}

// downForLog is a hub that answers every question but those about the log.
type downForLog struct{ *fakeAuthz }

func (d downForLog) Authorize(ctx context.Context, id apiauth.Identity, a apiauth.Attributes) error {
	if a.Subresource == apiauth.SubresourceLog {
		return fmt.Errorf("%w: hub unreachable", apiauth.ErrUnavailable)
	}
	return d.fakeAuthz.Authorize(ctx, id, a)
}

func kindsOf(t *testing.T, body []byte) []string {
	t.Helper()
	var arts []store.Artifact
	if err := json.Unmarshal(body, &arts); err != nil {
		t.Fatalf("list body %q: %v", body, err)
	}
	kinds := []string{}
	for _, a := range arts {
		kinds = append(kinds, a.Kind)
	}
	return kinds
}

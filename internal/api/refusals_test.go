package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/dispatch"
	"crucible.dev/crucible/internal/store"
)

// internalDetail is text only an internal error carries: no answer may show it.
const internalDetail = "dial tcp 10.0.0.7:6443: secret-internal-detail"

// refusal is one request the API must refuse, with the exact status, public
// message and field.
type refusal struct {
	name      string
	req       req
	setup     func(*testing.T, *fixture)
	wantCode  int
	wantError string
	wantField string
	// logged is what the log must hold of the cause (5xx only).
	logged string
}

// TestRefusals covers every 4xx the handlers answer (the guard's are in
// TestGuardDecisions) and the 5xx of a failing dependency: exact status,
// exact public message, never an internal cause, never a change to a row.
func TestRefusals(t *testing.T) {
	const admin = "tok-admin"
	long := strings.Repeat("n", 5000)
	var cases []refusal
	cases = append(cases, submitRefusals(admin, long)...)
	cases = append(cases, listRefusals(admin, long)...)
	cases = append(cases, podRefusals(admin, long)...)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.row(t, "p-wharf", "wharf")
			f.artifact(t, "p-wharf", "report", "result bytes")
			if tc.setup != nil {
				tc.setup(t, f)
			}
			w := f.do(t, tc.req)
			if w.Code != tc.wantCode {
				t.Fatalf("code = %d, want %d; body %s", w.Code, tc.wantCode, w.Body)
			}
			if ct := w.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q", ct)
			}
			e := errorBodyOf(t, w)
			if e.Error != tc.wantError || e.Field != tc.wantField {
				t.Errorf("error = %q field %q,\nwant    %q field %q", e.Error, e.Field, tc.wantError, tc.wantField)
			}
			if strings.Contains(w.Body.String(), "secret-internal-detail") {
				t.Errorf("internal error text reached the client: %s", w.Body)
			}
			if !strings.Contains(f.log.String(), tc.logged) {
				t.Errorf("the cause %q was not logged:\n%s", tc.logged, f.log)
			}
			if len(w.Body.String()) > 1500 {
				t.Errorf("answer of %d bytes: hostile input is echoed unbounded", w.Body.Len())
			}
			f.st.Fail(nil)
			p, err := f.st.GetWorkPod(t.Context(), "p-wharf")
			if err != nil || p.State != store.StateRunning {
				t.Errorf("p-wharf after a refused request: %s, %v", p.State, err)
			}
		})
	}
}

func submitRefusals(admin, long string) []refusal {
	post := func(body string) req { return req{method: "POST", path: "/api/pods", token: admin, body: body} }
	forbidden := &apierrors.StatusError{ErrStatus: apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "turn-x",
		errors.New("not allowed")).ErrStatus}
	return []refusal{
		{name: "submit: malformed JSON", req: post(`{"image":}`), wantCode: 400, wantError: "malformed JSON at byte 10"},
		{name: "submit: truncated JSON", req: post(`{"image":`), wantCode: 400, wantError: "unreadable JSON body"},
		{name: "submit: empty body", req: post(""), wantCode: 400, wantError: "unreadable JSON body"},
		{name: "submit: not an object", req: post(`["busybox"]`), wantCode: 400,
			wantError: "request body: must be object, not array"},
		{name: "submit: wrong type", req: post(`{"image":42}`), wantCode: 400, wantError: "image: Invalid value: must be string, not number", wantField: "image"},
		{name: "submit: unknown field", req: post(`{"image":"x","imagee":"y"}`), wantCode: 400, wantError: "imagee: Forbidden: unknown field", wantField: "imagee"},
		{name: "submit: unknown nested field", req: post(`{"image":"x","env":[{"name":"A","value":"b","valueFrom":{}}]}`), wantCode: 400,
			wantError: "env[0].valueFrom: Forbidden: unknown field", wantField: "env[0].valueFrom"},
		{name: "submit: case-mismatched field", req: post(`{"IMAGE":"busybox"}`), wantCode: 400, wantError: "IMAGE: Forbidden: unknown field", wantField: "IMAGE"},
		{name: "submit: duplicate field", req: post(`{"image":"busybox","image":"evil"}`), wantCode: 400, wantError: "image: Duplicate value", wantField: "image"},
		{name: "submit: unknown field, hostile name", req: post(`{"image":"x","<script>` + long + `":1}`), wantCode: 400,
			wantError: "<script>" + long[:92] + "…: Forbidden: unknown field", wantField: "<script>" + long[:92] + "…"},
		{name: "submit: trailing data", req: post(`{"image":"busybox"} {"image":"busybox"}`), wantCode: 400, wantError: "trailing data after the JSON object"},
		{name: "submit: oversized", req: post(`{"image":"x","args":["` + strings.Repeat("a", 1<<20) + `"]}`), wantCode: 413,
			wantError: "request body over 1048576 bytes"},
		{name: "submit: missing image", req: post(`{}`), wantCode: 400, wantError: "image: Required value", wantField: "image"},
		{name: "submit: image with a newline", req: post(`{"image":"busybox\nevil"}`), wantCode: 400,
			wantError: `image: Invalid value: "busybox\nevil": must not contain whitespace, control characters or invalid UTF-8`, wantField: "image"},
		{name: "submit: bad kind", req: post(`{"image":"x","kind":"batch"}`), wantCode: 400,
			wantError: `kind: Unsupported value: "batch": supported values: "loop", "turn"`, wantField: "kind"},
		{name: "submit: bad env name", req: post(`{"image":"x","env":[{"name":"1BAD","value":"v"}]}`), wantCode: 400,
			wantError: `env[0].name: Invalid value: "1BAD": a valid C identifier must start with alphabetic character or '_', followed by a string of alphanumeric characters or '_' (e.g. 'my_name',  or 'MY_NAME',  or 'MyName', regex used for validation is '[A-Za-z_][A-Za-z0-9_]*')`,
			wantField: "env[0].name"},
		{name: "submit: path trick in a file key", req: post(`{"image":"x","files":{"../etc/passwd":"x"}}`), wantCode: 400,
			wantError: `files[../etc/passwd]: Invalid value: "../etc/passwd": a valid config key must consist of alphanumeric characters, '-', '_' or '.' ` +
				`(e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+'); must not start with '..'`,
			wantField: "files[../etc/passwd]"},
		{name: "submit: unknown cluster, unicode", req: post(`{"image":"x","cluster":"wharf\u200b"}`), wantCode: 400,
			wantError: `cluster "wharf\u200b": no such cluster (known: wharf, dock)`, wantField: "cluster"},
		{name: "submit: unknown cluster, oversized", req: post(`{"image":"x","cluster":"` + long + `"}`), wantCode: 400,
			wantError: `cluster "` + long[:100] + `…": no such cluster (known: wharf, dock)`, wantField: "cluster"},
		{name: "submit: wrong Content-Type", req: req{method: "POST", path: "/api/pods", token: admin, body: `{"image":"x"}`, noJSON: true,
			header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}}, wantCode: 415,
			wantError: "Content-Type must be application/json, not application/x-www-form-urlencoded"},
		{name: "submit: missing X-Crucible-Client", req: req{method: "POST", path: "/api/pods", token: admin, body: `{"image":"x"}`, noClient: true},
			wantCode: 403, wantError: "state-changing requests need the X-Crucible-Client header"},
		{name: "submit: spoke forbids", req: post(`{"image":"busybox"}`), setup: func(_ *testing.T, f *fixture) {
			f.disp.dispatchErr = fmt.Errorf("spoke wharf: create configmap via %s: %w", internalDetail, forbidden)
		}, wantCode: 502, wantError: "dispatch to wharf failed: the spoke denied it (check the RBAC of `crucible render spoke`): " +
			`configmaps "turn-x" is forbidden: not allowed`, logged: internalDetail},
		{name: "submit: spoke unreachable", req: post(`{"image":"busybox"}`), setup: func(_ *testing.T, f *fixture) {
			f.disp.dispatchErr = errors.New(internalDetail)
		}, wantCode: 502, wantError: "dispatch to wharf failed: the call to the spoke failed (the controller's log has the cause)", logged: internalDetail},
		{name: "submit: name taken on the spoke", req: post(`{"image":"busybox"}`), setup: func(_ *testing.T, f *fixture) {
			f.disp.dispatchErr = fmt.Errorf("%s: %w", internalDetail, dispatch.ErrNotOurs)
		}, wantCode: 409, wantError: "dispatch to wharf failed: an object with the work pod's name exists on the spoke and is not this work pod's"},
		{name: "submit: store down", req: post(`{"image":"busybox"}`), setup: func(_ *testing.T, f *fixture) { f.st.Fail(errors.New(internalDetail)) },
			wantCode: 500, wantError: "internal error", logged: internalDetail},
		{name: "submit: wrong method", req: req{method: "PUT", path: "/api/pods", token: admin, body: `{"image":"x"}`,
			header: map[string]string{"Content-Type": "application/json", apiv1.ClientHeader: "t"}}, wantCode: 404, wantError: "no such endpoint: PUT /api/pods"},
	}
}

func listRefusals(admin, long string) []refusal {
	get := func(query string) req { return req{path: "/api/pods?" + query, token: admin} }
	return []refusal{
		{name: "list: unknown cluster", req: get("cluster=nope"), wantCode: 400, wantError: `cluster "nope": no such cluster`, wantField: "cluster"},
		{name: "list: oversized cluster", req: get("cluster=" + long), wantCode: 400, wantError: `cluster "` + long[:100] + `…": no such cluster`, wantField: "cluster"},
		{name: "list: bad kind", req: get("kind=%3Cscript%3E"), wantCode: 400, wantError: `kind "<script>": must be loop or turn`, wantField: "kind"},
		{name: "list: bad state", req: get("state=running,bogus"), wantCode: 400,
			wantError: `state "bogus": must be one of [pending dispatched running succeeded failed cancelled lost]`, wantField: "state"},
		{name: "list: unicode state", req: get("state=r%C3%BCnning"), wantCode: 400,
			wantError: `state "rünning": must be one of [pending dispatched running succeeded failed cancelled lost]`, wantField: "state"},
		{name: "list: oversized state", req: get("state=" + long), wantCode: 400,
			wantError: `state "` + long[:20] + `…": must be one of [pending dispatched running succeeded failed cancelled lost]`, wantField: "state"},
		{name: "list: limit not a number", req: get("limit=ten"), wantCode: 400, wantError: `limit "ten": must be a number from 1 to 10000`, wantField: "limit"},
		{name: "list: negative limit", req: get("limit=-1"), wantCode: 400, wantError: `limit "-1": must be a number from 1 to 10000`, wantField: "limit"},
		{name: "list: bad page token", req: get("continue=%00%01"), wantCode: 400, wantError: "continue: not a token this API issued", wantField: "continue"},
		{name: "list: store down", req: get(""), setup: func(_ *testing.T, f *fixture) { f.st.Fail(errors.New(internalDetail)) },
			wantCode: 500, wantError: "internal error", logged: internalDetail},
		{name: "clusters: wrong method", req: req{method: "POST", path: "/api/clusters", token: admin}, wantCode: 404,
			wantError: "no such endpoint: POST /api/clusters"},
	}
}

func podRefusals(admin, long string) []refusal {
	get := func(path string) req { return req{path: path, token: admin} }
	cancel := func(pod string) req { return req{method: "POST", path: "/api/pods/" + pod + "/cancel", token: admin} }
	// p-other is a second row for the refusals that change a row by design.
	other := func(state store.State) func(*testing.T, *fixture) {
		return func(t *testing.T, f *fixture) {
			f.row(t, "p-other", "wharf")
			if _, err := f.st.UpdateWorkPod(t.Context(), "p-other", func(p *store.WorkPod) error { p.State = state; return nil }); err != nil {
				t.Fatal(err)
			}
		}
	}
	return []refusal{
		{name: "get: unknown pod", req: get("/api/pods/nope-1"), wantCode: 404, wantError: `work pod "nope-1" not found`},
		{name: "get: path trick", req: get("/api/pods/..%2Fp-wharf"), wantCode: 404, wantError: `work pod "../p-wharf" not found`},
		{name: "get: unicode pod", req: get("/api/pods/p-wh%C3%A4rf"), wantCode: 404, wantError: `work pod "p-whärf" not found`},
		{name: "get: oversized pod", req: get("/api/pods/" + long), wantCode: 404, wantError: `work pod "` + long[:100] + `…" not found`},
		{name: "get: store down", req: get("/api/pods/p-wharf"), setup: func(_ *testing.T, f *fixture) { f.st.Fail(errors.New(internalDetail)) },
			wantCode: 500, wantError: "internal error", logged: internalDetail},
		{name: "get: wrong method", req: req{method: "DELETE", path: "/api/pods/p-wharf", token: admin,
			header: map[string]string{"Content-Type": "application/json", apiv1.ClientHeader: "t"}}, wantCode: 404, wantError: "no such endpoint: DELETE /api/pods/p-wharf"},
		{name: "cancel: unknown pod", req: cancel("nope-1"), wantCode: 404, wantError: `work pod "nope-1" not found`},
		{name: "cancel: already finished", req: cancel("p-other"), setup: other(store.StateSucceeded), wantCode: 409,
			wantError: "work pod p-other is already succeeded"},
		{name: "cancel: spoke delete fails", req: cancel("p-other"), setup: func(t *testing.T, f *fixture) {
			other(store.StateRunning)(t, f)
			f.disp.deleteErr = errors.New(internalDetail)
		}, wantCode: 502, wantError: "cancelled, but deleting the pod on wharf failed (the sweep will retry): the call to the spoke failed (the controller's log has the cause)", logged: internalDetail},
		{name: "cancel: missing X-Crucible-Client", req: req{method: "POST", path: "/api/pods/p-wharf/cancel", token: admin, noClient: true},
			wantCode: 403, wantError: "state-changing requests need the X-Crucible-Client header"},
		{name: "cancel: wrong method", req: get("/api/pods/p-wharf/cancel"), wantCode: 404, wantError: "no such endpoint: GET /api/pods/p-wharf/cancel"},
		{name: "artifacts: unknown pod", req: get("/api/pods/nope-1/artifacts"), wantCode: 404, wantError: `work pod "nope-1" not found`},
		{name: "artifact: unknown pod", req: get("/api/pods/nope-1/artifacts/report"), wantCode: 404, wantError: `work pod "nope-1" not found`},
		{name: "artifact: bad kind", req: get("/api/pods/p-wharf/artifacts/Report_1"), wantCode: 400,
			wantError: `kind "Report_1": must be a DNS label`, wantField: "kind"},
		{name: "artifact: path trick in kind", req: get("/api/pods/p-wharf/artifacts/..%2F..%2Fetc%2Fpasswd"), wantCode: 400,
			wantError: `kind "../../etc/passwd": must be a DNS label`, wantField: "kind"},
		{name: "artifact: oversized kind", req: get("/api/pods/p-wharf/artifacts/" + long), wantCode: 400,
			wantError: `kind "` + long[:100] + `…": must be a DNS label`, wantField: "kind"},
		{name: "artifact: unknown kind", req: get("/api/pods/p-wharf/artifacts/result"), wantCode: 404, wantError: `artifact "result" of p-wharf not found`},
		{name: "artifact: file missing", req: get("/api/pods/p-wharf/artifacts/report"), setup: func(_ *testing.T, f *fixture) { f.arts.bytes = nil },
			wantCode: 500, wantError: "artifact recorded but its file is missing", logged: "file does not exist"},
		{name: "artifact: wrong method", req: req{method: "PUT", path: "/api/pods/p-wharf/artifacts/report", token: admin,
			header: map[string]string{"Content-Type": "application/json", apiv1.ClientHeader: "t"}}, wantCode: 404,
			wantError: "no such endpoint: PUT /api/pods/p-wharf/artifacts/report"},
		{name: "logs: running pod as text", req: get("/api/pods/p-wharf/logs"), wantCode: 406,
			wantError: "work pod p-wharf is running: its log is a stream, ask with Accept: text/event-stream (crucible logs -f)"},
		{name: "logs: bad Last-Event-ID", req: req{path: "/api/pods/p-wharf/logs", token: admin,
			header: map[string]string{"Accept": "text/event-stream", "Last-Event-ID": "1; " + long}}, wantCode: 400,
			wantError: `Last-Event-ID "1; nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn": must be a line number`, wantField: "Last-Event-ID"},
		{name: "events: bad kind", req: req{path: "/api/events?kind=" + long, token: admin, header: sse}, wantCode: 400,
			wantError: `kind "` + long[:20] + `…": must be loop or turn`, wantField: "kind"},
		{name: "events: not a stream", req: get("/api/events"), wantCode: 406, wantError: "GET /api/events is a stream: send Accept: text/event-stream"},
	}
}

func errorBodyOf(t *testing.T, w *httptest.ResponseRecorder) (e struct{ Error, Field string }) {
	t.Helper()
	if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil {
		t.Fatalf("error body %q: %v", w.Body.String(), err)
	}
	return e
}

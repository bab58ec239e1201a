package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/httperr"
	"crucible.dev/crucible/internal/store"
	"crucible.dev/crucible/internal/workpod"
)

// decodeRefusal is what the client sees of a body decodeJSON refused.
type decodeRefusal struct {
	Code       int
	Msg, Field string
}

func refusalOf(t *testing.T, err error) *decodeRefusal {
	t.Helper()
	if err == nil {
		return nil
	}
	he, ok := errors.AsType[*httperr.Error](err)
	if !ok {
		t.Fatalf("decodeJSON returned %T %v, want an *httperr.Error", err, err)
	}
	return &decodeRefusal{he.Code, he.Msg, he.Field}
}

// decodeJSON takes exactly one JSON object whose keys match SubmitRequest's
// fields case-sensitively, each once; every other body is a 400 naming the
// field at fault by its path, every unknown field listed in document order.
func TestDecodeJSON(t *testing.T) {
	refuse := func(msg, field string) *decodeRefusal { return &decodeRefusal{http.StatusBadRequest, msg, field} }
	tests := []struct {
		name string
		body string
		want apiv1.SubmitRequest
		err  *decodeRefusal
	}{
		{name: "minimal", body: `{"image":"x"}`, want: apiv1.SubmitRequest{Image: "x"}},
		{name: "every field", body: `{"kind":"loop","cluster":"dock","image":"x","command":["a"],"args":["b"],"env":[{"name":"A","value":"1"}],` +
			`"files":{"f":"1"},"secret_files":{"s":"2"},"annotations":{"a/b":"3"}}`,
			want: apiv1.SubmitRequest{Kind: "loop", Cluster: "dock", Image: "x", Command: []string{"a"}, Args: []string{"b"},
				Env: []workpod.EnvVar{{Name: "A", Value: "1"}}, Files: map[string]string{"f": "1"},
				SecretFiles: map[string]string{"s": "2"}, Annotations: map[string]string{"a/b": "3"}}},
		{name: "map keys are data, not fields", body: `{"files":{"anything":"goes"},"annotations":{"IMAGE":"b"}}`,
			want: apiv1.SubmitRequest{Files: map[string]string{"anything": "goes"}, Annotations: map[string]string{"IMAGE": "b"}}},
		{name: "whitespace around the object", body: " \n{\"image\":\"x\"}\n\t", want: apiv1.SubmitRequest{Image: "x"}},
		// encoding/json folded case; the strict decoder, as kube-apiserver, does not.
		{name: "case-mismatched keys", body: `{"IMAGE":"x","Command":["a"]}`,
			err: refuse("[IMAGE: Forbidden: unknown field, Command: Forbidden: unknown field]", "IMAGE")},
		{name: "unknown field", body: `{"image":"x","imagee":"y"}`, err: refuse("imagee: Forbidden: unknown field", "imagee")},
		{name: "document order, not map order", body: `{"zzz":1,"aaa":2}`,
			err: refuse("[zzz: Forbidden: unknown field, aaa: Forbidden: unknown field]", "zzz")},
		{name: "unknown nested field", body: `{"env":[{"name":"A"},{"name":"B","secret":true}]}`,
			err: refuse("env[1].secret: Forbidden: unknown field", "env[1].secret")},
		{name: "empty key", body: `{"":1}`, err: refuse("[]: Forbidden: unknown field", "[]")},
		{name: "duplicate field", body: `{"image":"x","image":"y"}`, err: refuse("image: Duplicate value", "image")},
		{name: "duplicate map key", body: `{"files":{"a":"1","a":"2"}}`, err: refuse("files.a: Duplicate value", "files.a")},
		{name: "wrong type", body: `{"image":42}`, err: refuse("image: Invalid value: must be string, not number", "image")},
		{name: "wrong type in a list", body: `{"command":["a",{"deep":[1]}],"later":1}`,
			err: refuse("command: Invalid value: must be string, not object", "command")},
		{name: "wrong type nested", body: `{"env":[{"name":1}]}`, err: refuse("env.name: Invalid value: must be string, not number", "env.name")},
		{name: "list given a scalar", body: `{"command":"true"}`, err: refuse("command: Invalid value: must be array, not string", "command")},
		{name: "not an object", body: `["busybox"]`, err: refuse("request body: must be object, not array", "")},
		{name: "malformed", body: `{"image":}`, err: refuse("malformed JSON at byte 10", "")},
		{name: "truncated", body: `{"image":`, err: refuse("unreadable JSON body", "")},
		{name: "empty", body: "", err: refuse("unreadable JSON body", "")},
		{name: "trailing object", body: `{"image":"x"} {"image":"y"}`, err: refuse("trailing data after the JSON object", "")},
		{name: "trailing bracket", body: `{"image":"x"}]`, err: refuse("trailing data after the JSON object", "")},
		{name: "trailing garbage", body: `{"image":"x"} x`, err: refuse("trailing data after the JSON object", "")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got apiv1.SubmitRequest
			err := decodeJSON([]byte(tt.body), &got)
			if diff := cmp.Diff(tt.err, refusalOf(t, err)); diff != "" {
				t.Fatalf("refusal (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.want, got); err == nil && diff != "" {
				t.Errorf("decoded (-want +got):\n%s", diff)
			}
		})
	}
}

// A hostile body is named, never echoed: a huge key is cut in the field and
// the message, and a body of many unknown fields gives a bounded answer.
func TestDecodeJSONBoundsHostileNames(t *testing.T) {
	long := "<script>" + strings.Repeat("n", 5000)
	var got apiv1.SubmitRequest
	he := refusalOf(t, decodeJSON([]byte(`{"image":"x","`+long+`":1}`), &got))
	cut := long[:maxFieldPathBytes] + "…"
	if diff := cmp.Diff(&decodeRefusal{http.StatusBadRequest, cut + ": Forbidden: unknown field", cut}, he); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}

	var many strings.Builder
	many.WriteString(`{"image":"x"`)
	for i := range 500 {
		many.WriteString(`,"` + strings.Repeat("k", 90) + string(rune('a'+i%26)) + strings.Repeat("q", i) + `":1`)
	}
	many.WriteString("}")
	he = refusalOf(t, decodeJSON([]byte(many.String()), &got))
	if he == nil || he.Code != http.StatusBadRequest || len(he.Msg) > maxMessageBytes+len("…") || len(he.Field) > maxFieldPathBytes+len("…") {
		t.Errorf("refusal of %d bytes, field of %d bytes: %+v", len(he.Msg), len(he.Field), he)
	}
}

// FuzzDecodeJSON: decodeJSON never panics; what it accepts, encoding/json
// reads into the same value (strictness only refuses, it never reads
// differently); what it refuses is a bounded 400 whose field, if any, is a
// path that names no more than the body holds.
func FuzzDecodeJSON(f *testing.F) {
	for _, seed := range []string{`{"image":"x","imagee":"y"}`, `{"env":[{"name":"A","x":1}]}`, `{"IMAGE":"x"}`, `[]`, `{"a":`,
		`{"files":{"k":"v"}}`, `{"image":"x","image":"x"}`, `{"env":[{"name":1}]}`, `{"image":"x"} ]`, `{"\u0069mage":"x"}`, `null`, "{\"\xb2\xb2\":[]}"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var strict, lenient apiv1.SubmitRequest
		err := decodeJSON(data, &strict)
		if err == nil {
			if lerr := json.Unmarshal(data, &lenient); lerr != nil {
				t.Fatalf("%q: accepted, yet encoding/json refuses it: %v", data, lerr)
			}
			if diff := cmp.Diff(lenient, strict); diff != "" {
				t.Fatalf("%q: read differently from encoding/json (-lenient +strict):\n%s", data, diff)
			}
			return
		}
		he := refusalOf(t, err)
		if he.Code != http.StatusBadRequest {
			t.Fatalf("%q: refused with %d, want 400", data, he.Code)
		}
		if len(he.Msg) > maxMessageBytes+len("…") || len(he.Field) > maxFieldPathBytes+len("…") {
			t.Fatalf("%q: unbounded answer %+v", data, he)
		}
		// Invalid UTF-8 in a key reads as U+FFFD: count runes, not bytes.
		if utf8.RuneCountInString(he.Field) > len(data) {
			t.Fatalf("%q: field %q is longer than the body", data, he.Field)
		}
	})
}

// A submit with the fakes: the row is recorded, dispatched once, and shown.
func TestSubmitDispatches(t *testing.T) {
	f := newFixture(t)
	w := f.do(t, req{method: "POST", path: "/api/pods", token: "tok-admin", body: `{"image":"busybox","cluster":"dock","command":["true"]}`})
	if w.Code != http.StatusCreated {
		t.Fatalf("submit: %d %s", w.Code, w.Body)
	}
	var wp apiv1.WorkPod
	if err := json.Unmarshal(w.Body.Bytes(), &wp); err != nil {
		t.Fatal(err)
	}
	if wp.State != store.StateDispatched || wp.Cluster != "dock" || wp.Image != "busybox" || wp.PodUID != "uid-"+wp.ID || wp.Submitter != "admin" {
		t.Errorf("submitted %+v", wp)
	}
	if diff := cmp.Diff([]string{"dispatch dock"}, f.disp.called()); diff != "" {
		t.Errorf("spoke calls (-want +got):\n%s", diff)
	}
}

// A failed dispatch ends the row failed with the public reason, never the
// internal error's text.
func TestSubmitDispatchFailureRecorded(t *testing.T) {
	f := newFixture(t)
	f.disp.dispatchErr = errorString(internalDetail)
	w := f.do(t, req{method: "POST", path: "/api/pods", token: "tok-admin", body: `{"image":"busybox"}`})
	if w.Code != http.StatusBadGateway {
		t.Fatalf("submit: %d %s", w.Code, w.Body)
	}
	rows, err := f.st.ListWorkPods(t.Context(), store.Filter{})
	if err != nil || len(rows) != 1 {
		t.Fatalf("rows %+v, %v", rows, err)
	}
	want := "dispatch: the call to the spoke failed (the controller's log has the cause)"
	if rows[0].State != store.StateFailed || rows[0].Reason != want {
		t.Errorf("row %s %q, want failed %q", rows[0].State, rows[0].Reason, want)
	}
}

type errorString string

func (e errorString) Error() string { return string(e) }

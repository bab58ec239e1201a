package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"crucible.dev/crucible/internal/store"
)

func TestUnknownField(t *testing.T) {
	cases := []struct {
		body, want string
		found      bool
	}{
		{`{"image":"x"}`, "", false},
		{`{"IMAGE":"x","Command":["a"]}`, "", false}, // encoding/json folds case
		{`{"image":"x","imagee":"y"}`, "imagee", true},
		{`{"zzz":1,"aaa":2}`, "zzz", true}, // document order, not map order
		{`{"env":[{"name":"A"},{"name":"B","secret":true}]}`, "secret", true},
		{`{"files":{"anything":"goes"},"annotations":{"a":"b"}}`, "", false},
		{`{"image":"x","args":[{"nested":{"deep":[1,2,{"k":null}]}}],"later":1}`, "later", true},
		{`{"":1}`, "", true},
		{`{"image":`, "", false}, // not JSON: nothing to name
	}
	for _, tc := range cases {
		got, found := unknownField([]byte(tc.body), typeOfSubmit)
		if got != tc.want || found != tc.found {
			t.Errorf("%s: %q %v, want %q %v", tc.body, got, found, tc.want, tc.found)
		}
	}
}

// FuzzUnknownField: whenever the strict decode refuses a body that the
// lenient one takes, the refusal is an unknown field and unknownField names
// one that the body holds; it never panics on any input.
func FuzzUnknownField(f *testing.F) {
	for _, seed := range []string{`{"image":"x","imagee":"y"}`, `{"env":[{"name":"A","x":1}]}`, `{"IMAGE":"x"}`, `[]`, `{"a":`, `{"files":{"k":"v"}}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		name, ok := unknownField(data, typeOfSubmit)
		var strict, lenient SubmitRequest
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		strictErr := dec.Decode(&strict)
		lenientErr := json.NewDecoder(bytes.NewReader(data)).Decode(&lenient)
		if strictErr != nil && lenientErr == nil {
			if !ok {
				t.Fatalf("%q: strict decode failed (%v), no unknown field found", data, strictErr)
			}
			// Escaped keys (\u0041) and truncated names are not in the
			// body verbatim.
			plain := utf8.Valid(data) && !bytes.Contains(data, []byte(`\`)) && !strings.HasSuffix(name, "…")
			if plain && !bytes.Contains(data, []byte(`"`+name+`"`)) {
				t.Fatalf("%q: unknown field %q is not in the body", data, name)
			}
		}
		if strictErr == nil && ok {
			t.Fatalf("%q: accepted body, yet unknown field %q", data, name)
		}
	})
}

// A submit with the fakes: the row is recorded, dispatched once, and shown.
func TestSubmitDispatches(t *testing.T) {
	f := newFixture(t)
	w := f.do(t, req{method: "POST", path: "/api/pods", token: "tok-admin", body: `{"IMAGE":"busybox","cluster":"dock","command":["true"]}`})
	if w.Code != http.StatusCreated {
		t.Fatalf("submit: %d %s", w.Code, w.Body)
	}
	var wp WorkPod
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

var typeOfSubmit = reflect.TypeFor[*SubmitRequest]()

type errorString string

func (e errorString) Error() string { return string(e) }

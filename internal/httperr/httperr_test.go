package httperr

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestWrite(t *testing.T) {
	cause := errors.New("dial tcp 10.0.0.7:6443: secret-internal-detail")
	tests := []struct {
		name       string
		method     string
		err        error
		format     Format
		wantCode   int
		wantBody   string
		wantHeader http.Header
	}{
		{"JSON with a field", "POST", &Error{Code: 400, Msg: "image: Required value", Field: "image"}, JSON, 400,
			"{\n  \"error\": \"image: Required value\",\n  \"field\": \"image\"\n}\n",
			http.Header{"Content-Type": {"application/json"}, "Content-Length": {"59"}, "X-Content-Type-Options": {"nosniff"}}},
		{"JSON escapes markup", "GET", New(404, `work pod "<script>" not found`), JSON, 404,
			"{\n  \"error\": \"work pod \\\"\\u003cscript\\u003e\\\" not found\"\n}\n", nil},
		{"compact JSON drops the field", "POST", &Error{Code: 403, Msg: "forbidden", Field: "x", Err: cause}, CompactJSON, 403,
			`{"error":"forbidden"}` + "\n", nil},
		{"text", "POST", Wrap(400, "spec.token is empty", cause), Text, 400, "spec.token is empty\n",
			http.Header{"Content-Type": {"text/plain; charset=utf-8"}, "Content-Length": {"20"}, "X-Content-Type-Options": {"nosniff"}}},
		{"headers of the error", "GET", New(503, "keys temporarily unavailable").With("Retry-After", "7").With("Cache-Control", "no-store"),
			CompactJSON, 503, `{"error":"keys temporarily unavailable"}` + "\n",
			http.Header{"Content-Type": {"application/json"}, "Content-Length": {"41"}, "X-Content-Type-Options": {"nosniff"},
				"Retry-After": {"7"}, "Cache-Control": {"no-store"}}},
		{"HEAD has no body", "HEAD", New(405, "method not allowed"), CompactJSON, 405, "", nil},
		{"unclassified error is a fixed 500", "GET", fmt.Errorf("list pods: %w", cause), JSON, 500,
			"{\n  \"error\": \"internal error\"\n}\n", nil},
		{"wrapped Error keeps its status", "GET", fmt.Errorf("update row: %w", New(409, "work pod p is already failed")), JSON, 409,
			"{\n  \"error\": \"work pod p is already failed\"\n}\n", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			Write(w, httptest.NewRequest(tc.method, "/x", nil), tc.err, tc.format)
			if w.Code != tc.wantCode || w.Body.String() != tc.wantBody {
				t.Fatalf("got %d %q, want %d %q", w.Code, w.Body, tc.wantCode, tc.wantBody)
			}
			if tc.wantHeader != nil {
				if diff := cmp.Diff(tc.wantHeader, w.Header()); diff != "" {
					t.Errorf("headers (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestErrorIdentity(t *testing.T) {
	e := Wrap(http.StatusInternalServerError, "artifact recorded but its file is missing", fs.ErrNotExist)
	if !errors.Is(fmt.Errorf("serve: %w", e), fs.ErrNotExist) {
		t.Error("the cause is not reachable with errors.Is")
	}
	if got := From(fmt.Errorf("serve: %w", e)); got != e {
		t.Errorf("From = %v, want the wrapped *Error", got)
	}
	if got, want := e.Error(), "500 artifact recorded but its file is missing: file does not exist"; got != want {
		t.Errorf("Error() = %q, want %q (for logs)", got, want)
	}
	if got := From(nil); got.Code != 500 || got.Msg != InternalMessage {
		t.Errorf("From(nil) = %+v", got)
	}
}

func TestWriteKeepsEdgeHeaders(t *testing.T) {
	w := httptest.NewRecorder()
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Length", "999") // a stale length must not survive
	Write(w, nil, New(http.StatusUnauthorized, "unauthorized").With("WWW-Authenticate", "Bearer"), CompactJSON)
	want := http.Header{"Cache-Control": {"no-store"}, "Content-Type": {"application/json"}, "Content-Length": {"25"},
		"X-Content-Type-Options": {"nosniff"}, "Www-Authenticate": {"Bearer"}}
	if diff := cmp.Diff(want, w.Header()); diff != "" {
		t.Errorf("headers (-want +got):\n%s", diff)
	}
	if w.Body.String() != `{"error":"unauthorized"}`+"\n" {
		t.Errorf("body %q", w.Body)
	}
}

// Truncate never grows a message past n bytes plus the mark, and never cuts
// a character in two.
func TestTruncate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"abcdefghijk", 10, "abcdefghij…"},
		{"ééééé", 3, "é…"}, // 2-byte runes: byte 3 is inside the second
		{"", 0, ""},
		{"x", 0, "…"},
	} {
		if got := Truncate(tc.in, tc.n); got != tc.want {
			t.Errorf("Truncate(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

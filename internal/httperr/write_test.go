package httperr

import (
	"math"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"
)

type view struct {
	Name  string `json:"name"`
	Count int    `json:"count"`
}

func TestWriteJSON(t *testing.T) {
	v := view{Name: "<b>", Count: 2}
	tests := []struct {
		name       string
		method     string
		format     Format
		wantBody   string
		wantHeader http.Header
	}{
		{"JSON is indented", "GET", JSON, "{\n  \"name\": \"\\u003cb\\u003e\",\n  \"count\": 2\n}\n",
			http.Header{"Content-Type": {"application/json"}, "Content-Length": {"44"}, "X-Content-Type-Options": {"nosniff"}, "Cache-Control": {"no-store"}}},
		{"compact JSON is one line", "POST", CompactJSON, `{"name":"\u003cb\u003e","count":2}` + "\n",
			http.Header{"Content-Type": {"application/json"}, "Content-Length": {"35"}, "X-Content-Type-Options": {"nosniff"}, "Cache-Control": {"no-store"}}},
		{"a text edge's JSON is one line", "GET", Text, `{"name":"\u003cb\u003e","count":2}` + "\n", nil},
		{"HEAD has the headers, no body", "HEAD", JSON, "",
			http.Header{"Content-Type": {"application/json"}, "Content-Length": {"44"}, "X-Content-Type-Options": {"nosniff"}, "Cache-Control": {"no-store"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			w.Header().Set("Cache-Control", "no-store") // the edge's own header stays
			if err := WriteJSON(w, httptest.NewRequest(tc.method, "/x", nil), http.StatusCreated, v, tc.format); err != nil {
				t.Fatal(err)
			}
			if w.Code != http.StatusCreated || w.Body.String() != tc.wantBody {
				t.Fatalf("got %d %q, want 201 %q", w.Code, w.Body, tc.wantBody)
			}
			if tc.wantHeader != nil {
				if diff := cmp.Diff(tc.wantHeader, w.Header()); diff != "" {
					t.Errorf("headers (-want +got):\n%s", diff)
				}
			}
		})
	}
}

// A value that does not encode is the handler's error to return: nothing
// is written, so its edge can still answer a 500.
func TestWriteJSONUnencodable(t *testing.T) {
	w := httptest.NewRecorder()
	if err := WriteJSON(w, nil, http.StatusOK, math.Inf(1), JSON); err == nil {
		t.Fatal("no error for +Inf")
	}
	if len(w.Header()) != 0 || w.Body.Len() != 0 { // WriteBody sets headers before anything else
		t.Errorf("written: %v %q", w.Header(), w.Body)
	}
	Edge{Format: JSON}.Fail(w, nil, WriteJSON(w, nil, http.StatusOK, math.Inf(1), JSON))
	if w.Code != http.StatusInternalServerError || w.Body.String() != "{\n  \"error\": \"internal error\"\n}\n" {
		t.Errorf("got %d %q, want the fixed 500", w.Code, w.Body)
	}
}

func TestWriteBody(t *testing.T) {
	w := httptest.NewRecorder()
	WriteBody(w, nil, http.StatusOK, "application/jwk-set+json", []byte(`{"keys":[]}`))
	want := http.Header{"Content-Type": {"application/jwk-set+json"}, "Content-Length": {"11"}, "X-Content-Type-Options": {"nosniff"}}
	if diff := cmp.Diff(want, w.Header()); diff != "" {
		t.Errorf("headers (-want +got):\n%s", diff)
	}
	if w.Code != http.StatusOK || w.Body.String() != `{"keys":[]}` {
		t.Errorf("got %d %q, want the bytes as given", w.Code, w.Body)
	}
	// The shared values are appended to as this answer's copies only.
	w = httptest.NewRecorder()
	WriteBody(w, nil, http.StatusOK, "application/json", []byte("{}\n"))
	w.Header().Add("X-Content-Type-Options", "again")
	w.Header().Add("Content-Type", "again")
	if diff := cmp.Diff([][]string{{"nosniff"}, {"application/json"}}, [][]string{nosniff, jsonContentTypes}); diff != "" {
		t.Errorf("a shared header value changed (-want +got):\n%s", diff)
	}
}

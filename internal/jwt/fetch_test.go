package jwt

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestGetJSON(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.Header.Get("Accept"), "application/json") {
			http.Error(w, "accept", http.StatusNotAcceptable)
			return
		}
		_, _ = w.Write([]byte(`{"jwks_uri":"https://h/keys"}`))
	})
	mux.HandleFunc("/exactly-max", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"a":"` + strings.Repeat("x", MaxDocumentBytes-8) + `"}`))
	})
	mux.HandleFunc("/too-big", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"a":"` + strings.Repeat("x", MaxDocumentBytes) + `"}`))
	})
	mux.HandleFunc("/not-json", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("<html>")) })
	mux.HandleFunc("/empty", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ok", http.StatusFound) })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	noRedirects := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	tests := []struct {
		path    string
		client  *http.Client
		wantErr string // empty: success
	}{
		{"/ok", srv.Client(), ""},
		{"/exactly-max", srv.Client(), ""},
		{"/too-big", srv.Client(), "larger than 1048576 bytes"},
		{"/not-json", srv.Client(), "invalid character"},
		{"/empty", srv.Client(), "unexpected end of JSON input"},
		{"/missing", srv.Client(), "404 Not Found"},
		{"/redirect", noRedirects, "302 Found"},
		{"/redirect", srv.Client(), ""},
	}
	for _, tt := range tests {
		var v map[string]any
		err := GetJSON(t.Context(), tt.client, srv.URL+tt.path, &v)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%s: %v", tt.path, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%s: error %v, want one containing %q", tt.path, err, tt.wantErr)
		case tt.wantErr != "" && !strings.Contains(err.Error(), tt.path):
			t.Errorf("%s: error %q does not name the URL", tt.path, err)
		}
	}
	if err := GetJSON(t.Context(), srv.Client(), "http://%zz", new(any)); err == nil {
		t.Error("a malformed URL: no error")
	}
}

package httpserve

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestPprofHandler: the profiler's listener serves /debug/pprof/ and
// nothing else.
func TestPprofHandler(t *testing.T) {
	tests := []struct {
		path       string
		wantStatus int
	}{
		{"/debug/pprof/", http.StatusOK},
		{"/debug/pprof/heap", http.StatusOK},
		{"/debug/pprof/allocs?debug=1", http.StatusOK},
		{"/debug/pprof/goroutine?debug=2", http.StatusOK},
		{"/debug/pprof/cmdline", http.StatusOK},
		{"/debug/pprof/symbol", http.StatusOK},
		{"/debug/pprof/no-such-profile", http.StatusNotFound},
		{"/", http.StatusNotFound},
		{"/metrics", http.StatusNotFound},
		{"/api/pods", http.StatusNotFound},
	}
	h := PprofHandler()
	for _, tt := range tests {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tt.path, nil))
		if rec.Code != tt.wantStatus {
			t.Errorf("GET %s = %d, want %d", tt.path, rec.Code, tt.wantStatus)
		}
	}
}

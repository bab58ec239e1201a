package cli

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestOpsHandlerPprof: the profiler is served on the operations listener
// only with --pprof, and never hides the metrics handler.
func TestOpsHandlerPprof(t *testing.T) {
	metrics := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte("metrics"))
	})
	tests := []struct {
		pprof      bool
		path       string
		wantStatus int
	}{
		{false, "/debug/pprof/", http.StatusNotFound},
		{false, "/debug/pprof/heap", http.StatusNotFound},
		{false, "/metrics", http.StatusOK},
		{true, "/debug/pprof/", http.StatusOK},
		{true, "/debug/pprof/heap", http.StatusOK},
		{true, "/metrics", http.StatusOK},
		{true, "/nothing", http.StatusNotFound},
	}
	for _, tt := range tests {
		rec := httptest.NewRecorder()
		opsHandler(metrics, tt.pprof).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tt.path, nil))
		if rec.Code != tt.wantStatus {
			t.Errorf("pprof=%v GET %s = %d, want %d", tt.pprof, tt.path, rec.Code, tt.wantStatus)
		}
	}
}

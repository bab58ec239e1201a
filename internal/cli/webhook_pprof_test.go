package cli

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestOpsHandlerPprof: the profiler is served on the operations listener
// only with --pprof, and never hides the metrics handler; with or without
// it, a Host that is no IP literal and not allowed gets 421.
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
		host       string
		path       string
		wantStatus int
	}{
		{false, "localhost:9090", "/debug/pprof/", http.StatusNotFound},
		{false, "localhost:9090", "/debug/pprof/heap", http.StatusNotFound},
		{false, "localhost:9090", "/metrics", http.StatusOK},
		{false, "10.0.0.7:9090", "/metrics", http.StatusOK},
		{false, "rebind.example:9090", "/metrics", http.StatusMisdirectedRequest},
		{true, "localhost:9090", "/debug/pprof/", http.StatusOK},
		{true, "127.0.0.1:9090", "/debug/pprof/heap", http.StatusOK},
		{true, "localhost:9090", "/metrics", http.StatusOK},
		{true, "localhost:9090", "/nothing", http.StatusNotFound},
		{true, "rebind.example:9090", "/debug/pprof/heap", http.StatusMisdirectedRequest},
	}
	for _, tt := range tests {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, tt.path, nil)
		r.Host = tt.host
		opsHandler(metrics, tt.pprof, []string{"localhost"}).ServeHTTP(rec, r)
		if rec.Code != tt.wantStatus {
			t.Errorf("pprof=%v Host %s GET %s = %d, want %d", tt.pprof, tt.host, tt.path, rec.Code, tt.wantStatus)
		}
	}
}

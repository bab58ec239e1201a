package chaos

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The scenarios' evidence comes from the metrics they scrape: the parser
// keeps whole series names (labels with spaces too), skips comments, and
// refuses a value it cannot read rather than counting it as zero.
func TestScrapeAndByLabel(t *testing.T) {
	serve := func(body string, code int) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/metrics" {
				http.NotFound(w, r)
				return
			}
			w.WriteHeader(code)
			_, _ = w.Write([]byte(body))
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	before, err := scrape(t.Context(), serve(`# HELP crucible_ingest_requests_total Answers.
# TYPE crucible_ingest_requests_total counter
crucible_ingest_requests_total{outcome="created"} 3
crucible_sweep_skipped_total{cluster="wharf"} 1
go_goroutines 42
`, http.StatusOK))
	if err != nil {
		t.Fatal(err)
	}
	after, err := scrape(t.Context(), serve(`crucible_ingest_requests_total{outcome="created"} 5
crucible_ingest_requests_total{outcome="insufficient_storage"} 7
crucible_sweep_skipped_total{cluster="wharf"} 1
crucible_log_collections_total{cluster="dock",result="error",detail="no space left on device"} 2
go_goroutines 40
`, http.StatusOK))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int{"created": 2, "insufficient_storage": 7}, byLabel(before, after, "crucible_ingest_requests_total", "outcome")); diff != "" {
		t.Errorf("byLabel outcome (-want +got):\n%s", diff)
	}
	if got := byLabel(before, after, "crucible_sweep_skipped_total", "cluster"); len(got) != 0 {
		t.Errorf("unchanged series reported: %v", got)
	}
	if got := sum(after, "crucible_log_collections_total", `result="error"`); got != 2 {
		t.Errorf("sum of a series with a spaced label value = %v, want 2", got)
	}
	if got := sum(after, "go_goroutines"); got != 40 {
		t.Errorf("go_goroutines = %v, want 40", got)
	}
	for name, body := range map[string]string{
		"value not a number": "go_goroutines many\n",
		"line too long":      "x " + strings.Repeat("1", 2<<20) + "\n",
	} {
		if _, err := scrape(t.Context(), serve(body, http.StatusOK)); err == nil {
			t.Errorf("%s: scraped without an error", name)
		}
	}
	if _, err := scrape(t.Context(), serve("go_goroutines 1\n", http.StatusServiceUnavailable)); err == nil {
		t.Error("a 503 was scraped as metrics")
	}
}

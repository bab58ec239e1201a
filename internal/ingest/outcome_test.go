package ingest

import (
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"crucible.dev/crucible/internal/metrics"
)

// Every answer is counted once, under its outcome: a refusal under its
// error's label, a stored upload as created, the same bytes again as
// duplicate.
func TestAnswersCountedByOutcome(t *testing.T) {
	e := newEnv(t)
	tok := e.addPod("wp-1", "uid-1")
	tests := []struct {
		name    string
		method  string
		kind    string
		token   string
		body    string
		want    int
		outcome string
	}{
		{"wrong method", http.MethodGet, "result", tok, "", 405, "bad_request"},
		{"reserved kind", http.MethodPost, "log", tok, "x", 403, "reserved"},
		{"no token", http.MethodPost, "result", "", "x", 401, "unauthorized"},
		{"stored", http.MethodPost, "result", tok, "data", 201, "created"},
		{"same bytes again", http.MethodPost, "result", tok, "data", 200, "duplicate"},
		{"other bytes", http.MethodPost, "result", tok, "else", 409, "conflict"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			counter := metrics.IngestRequests.WithLabelValues(tc.outcome)
			before := testutil.ToFloat64(counter)
			w := e.serve(e.request(tc.method, "/api/pods/wp-1/artifacts/"+tc.kind, tc.token, []byte(tc.body)))
			if w.Code != tc.want {
				t.Fatalf("status %d, want %d (body %s)", w.Code, tc.want, w.Body)
			}
			if got := testutil.ToFloat64(counter) - before; got != 1 {
				t.Errorf("%s counted %v times, want once", tc.outcome, got)
			}
		})
	}
}

package ingest

import (
	"fmt"
	"net/http"
	"testing"

	"crucible.dev/crucible/internal/benchreport"
	"crucible.dev/crucible/internal/profile"
)

// BenchmarkFlood counts the TokenReviews the drop-box sends its spoke for
// 10,000 uploads of each kind of flood: tokens forged with a key the spoke
// never published (the pre-check refuses them: none), one validly signed
// token the spoke rejects (the negative cache: at most one per NegativeTTL;
// the clock does not move here), and 100 valid pod tokens (the accept
// cache: at most one each).
func BenchmarkFlood(b *testing.B) {
	const requests, validPods = 10000, 100
	body := []byte("flood")
	for b.Loop() {
		e := newEnv(b)
		forged := sign(b, otherKey, testKID, podClaims(e.clock.Now(), "wp-0", "uid-0"))
		valid := make([]string, validPods)
		for i := range valid {
			valid[i] = e.addPod(fmt.Sprintf("wp-%d", i), fmt.Sprintf("uid-%d", i))
		}
		rejected := e.addPod("wp-r", "uid-r") // signed by the spoke's key, refused by its TokenReview
		e.spoke.setMode(rejected, modeReject)

		count := func(name string, token func(i int) string, pod func(i int) string, wantCode int) int64 {
			before := e.spoke.reviews.Load()
			for i := range requests {
				w := e.post(pod(i), "result", token(i), body)
				if wantCode != 0 && w.Code != wantCode {
					b.Fatalf("%s: request %d: status %d, want %d", name, i, w.Code, wantCode)
				}
			}
			return e.spoke.reviews.Load() - before
		}
		forgedReviews := count("forged", func(int) string { return forged }, func(int) string { return "wp-0" }, http.StatusUnauthorized)
		rejectedReviews := count("rejected", func(int) string { return rejected }, func(int) string { return "wp-r" }, http.StatusUnauthorized)
		validReviews := count("valid", func(i int) string { return valid[i%validPods] }, func(i int) string { return fmt.Sprintf("wp-%d", i%validPods) }, 0)
		b.Logf("TokenReviews per %d requests: forged %d, one rejected token %d, %d valid tokens %d", requests, forgedReviews, rejectedReviews, validPods, validReviews)
		b.ReportMetric(float64(forgedReviews), "reviews-forged")
		b.ReportMetric(float64(rejectedReviews), "reviews-rejected")
		b.ReportMetric(float64(validReviews), "reviews-valid")

		method := fmt.Sprintf("%d uploads per case through the drop-box handler (in process), a fake spoke counting TokenReviews, "+
			"default NegativeTTL %s and AcceptTTL %s, clock still", requests, profile.DefaultIngestNegativeTTL, profile.DefaultIngestAcceptTTL)
		rows := []benchreport.Record{
			benchreport.Record{ID: "flood", Case: "forged tokens", Unit: "TokenReviews", Value: float64(forgedReviews), Goal: "0", Method: method}.Judged(forgedReviews == 0),
			benchreport.Record{ID: "flood", Case: "one rejected token", Unit: "TokenReviews", Value: float64(rejectedReviews), Goal: "≤ 1 per TTL", Method: method}.Judged(rejectedReviews <= 1),
			benchreport.Record{ID: "flood", Case: "100 valid tokens", Unit: "TokenReviews", Value: float64(validReviews), Goal: "≤ 100", Method: method}.Judged(validReviews <= validPods),
		}
		for _, r := range rows {
			if err := benchreport.Append(r); err != nil {
				b.Fatal(err)
			}
		}
	}
}

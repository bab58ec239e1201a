package ingest

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"crucible.dev/crucible/internal/benchreport"
)

// BenchmarkUpload4KiBWarm measures accepted 4 KiB uploads (201: stage,
// fsync, rename, record) with warm key and accept caches, and the same
// handler path with authentication switched off, and reports both rates and
// their ratio. ns/op covers one upload of each kind.
func BenchmarkUpload4KiBWarm(b *testing.B) {
	body := make([]byte, 4<<10)
	run := func(e *env, token string, n int, prefix string) time.Duration {
		b.Helper()
		start := time.Now()
		for i := range n {
			if w := e.post("wp-1", fmt.Sprintf("%s%d", prefix, i), token, body); w.Code != http.StatusCreated {
				b.Fatalf("upload %d: status %d", i, w.Code)
			}
		}
		return time.Since(start)
	}

	// Every upload is a new kind; the per-pod kind quota is not what is
	// measured, so it is lifted.
	noQuota := func(o *Options) { o.MaxKindsPerPod = 1 << 30 }
	auth := newEnv(b, noQuota)
	token := auth.addPod("wp-1", "uid-1")
	run(auth, token, 1, "warm") // fetch the keys and fill the accept cache
	plain := newEnv(b, noQuota, func(o *Options) { o.insecureSkipAuth = true })
	plain.addPod("wp-1", "uid-1")

	// Interleaved, so drift in disk speed hits both paths alike.
	n := 0
	var authTime, plainTime time.Duration
	for b.Loop() {
		authTime += run(auth, token, 1, fmt.Sprintf("k%d-", n))
		plainTime += run(plain, "", 1, fmt.Sprintf("k%d-", n))
		n++
	}
	authRate := float64(n) / authTime.Seconds()
	plainRate := float64(n) / plainTime.Seconds()
	if reviews := auth.spoke.reviews.Load(); reviews != 1 {
		b.Errorf("TokenReviews = %d, want 1 (warm accept cache)", reviews)
	}
	b.ReportMetric(authRate, "auth-uploads/s")
	b.ReportMetric(plainRate, "noauth-uploads/s")
	b.ReportMetric(authRate/plainRate, "auth/noauth")
	rec := benchreport.Record{ID: "dropbox", Case: "4 KiB uploads, warm caches", Unit: "uploads/s", Value: authRate, Goal: "≥ 0.9×",
		Method: fmt.Sprintf("%d accepted uploads (201: stage, fsync, rename, record) through the drop-box handler in process, SQLite store, "+
			"interleaved one by one with the same handler with authentication off; one TokenReview in all (warm accept cache)", n),
	}.WithBaseline("same server, auth off", plainRate)
	if err := benchreport.Append(rec.Judged(rec.Ratio >= 0.9)); err != nil {
		b.Fatal(err)
	}
}

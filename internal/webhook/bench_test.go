package webhook

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkReview measures one TokenReview through the handler, from request
// body to encoded answer, with the keys already loaded (no fetch), CEL
// claim validation and extra mapping included.
func BenchmarkReview(b *testing.B) {
	f := newFixture(b, defaultProvider())
	body := reviewBody(v1, hubToken(b, hubClaims()))
	if status, err := f.tryReview(v1, hubToken(b, hubClaims())); err != nil || !status.Authenticated {
		b.Fatalf("warm-up review: %+v %v", status, err)
	}
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		rec := httptest.NewRecorder()
		f.h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("status %d", rec.Code)
		}
	}
}

package webhook

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	jose "github.com/go-jose/go-jose/v4"

	"crucible.dev/crucible/internal/benchreport"
	"crucible.dev/crucible/internal/render"
)

// benchTokens is how many distinct tokens the distinct-token benchmarks
// cycle through: more than the verified-token cache holds, so every review
// is a cache miss (the benchmark checks it).
const benchTokens = 2 * defaultVerifiedCacheSize

// distinctBodies signs n distinct hub tokens (each its own jti) and returns
// their TokenReview request bodies.
func distinctBodies(b *testing.B, n int) [][]byte {
	b.Helper()
	bodies := make([][]byte, n)
	for i := range bodies {
		claims := with(hubClaims(), map[string]any{"jti": fmt.Sprintf("bench-%08d", i)})
		bodies[i] = reviewBody(v1, hubToken(b, claims))
	}
	return bodies
}

// renderedFixture serves the configuration crucible renders for a spoke
// (render.WebhookConfig, as devstack and `crucible render spoke` write it):
// a username mapping by claim and no CEL.
func renderedFixture(b *testing.B) *fixture {
	b.Helper()
	iss := newTestIssuer(b)
	data, err := render.WebhookConfig(render.HubTrust{
		Issuer: hubIssuer, DiscoveryURL: iss.discoveryURL(), CertificateAuthority: iss.caPEM(),
		Audience: hubAudience, AllowedSubjects: []string{controllerSub}, UsernamePrefix: "hub:",
	})
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := ParseConfig(data)
	if err != nil {
		b.Fatal(err)
	}
	return newFixtureFor(b, iss, cfg)
}

// BenchmarkReview measures one TokenReview through the handler, from request
// body to encoded answer, with the keys already loaded (no fetch) and the
// configuration crucible renders, for distinct tokens: every review misses
// the verified-token cache and checks a signature. Its baseline is
// BenchmarkVerifyAlone.
func BenchmarkReview(b *testing.B) {
	f := renderedFixture(b)
	benchReviews(b, f, distinctBodies(b, benchTokens))
	if hits := f.srv.current.Load().verified.hits.Load(); hits != 0 {
		b.Fatalf("distinct tokens hit the verified-token cache %d times", hits)
	}
}

// BenchmarkReviewCEL is BenchmarkReview with a CEL claim validation rule and
// a CEL extra mapping configured (what CEL costs when someone uses it).
func BenchmarkReviewCEL(b *testing.B) {
	f := newFixture(b, defaultProvider())
	benchReviews(b, f, distinctBodies(b, benchTokens))
	if hits := f.srv.current.Load().verified.hits.Load(); hits != 0 {
		b.Fatalf("distinct tokens hit the verified-token cache %d times", hits)
	}
}

// BenchmarkReviewRepeated is BenchmarkReview for one token asked about again
// and again, as the several API servers of one spoke do: answered from the
// verified-token cache.
func BenchmarkReviewRepeated(b *testing.B) {
	f := renderedFixture(b)
	benchReviews(b, f, distinctBodies(b, 1))
}

func benchReviews(b *testing.B, f *fixture, bodies [][]byte) {
	b.Helper()
	if status, err := f.tryReview(v1, hubToken(b, hubClaims())); err != nil || !status.Authenticated {
		b.Fatalf("warm-up review: %+v %v", status, err)
	}
	req := httptest.NewRequest(http.MethodPost, "/", nil)
	body := bytes.NewReader(nil)
	rec := &discardWriter{header: http.Header{}}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		body.Reset(bodies[i%len(bodies)])
		i++
		req.Body = nopCloser{body}
		rec.code = 0
		f.h.ServeHTTP(rec, req)
		if rec.code != http.StatusOK {
			b.Fatalf("status %d", rec.code)
		}
	}
}

// BenchmarkVerifyAlone is the baseline of BenchmarkReview: the RSA (RS256,
// 2048-bit) signature check of one token by go-jose, nothing else.
func BenchmarkVerifyAlone(b *testing.B) {
	token := hubToken(b, hubClaims())
	jws, err := jose.ParseSignedCompact(token, []jose.SignatureAlgorithm{jose.RS256})
	if err != nil {
		b.Fatal(err)
	}
	pub := &testKeys()[0].PublicKey
	b.ReportAllocs()
	for b.Loop() {
		if _, err := jws.Verify(pub); err != nil {
			b.Fatal(err)
		}
	}
}

// discardWriter is an http.ResponseWriter that keeps the status only, so the
// benchmark measures the handler and not httptest's recorder.
type discardWriter struct {
	header http.Header
	code   int
}

func (w *discardWriter) Header() http.Header { return w.header }
func (w *discardWriter) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return len(p), nil
}
func (w *discardWriter) WriteHeader(code int) { w.code = code }

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }

// BenchmarkAuthenticatorAlone is the share of BenchmarkReview that is
// k8s.io/apiserver's JWT authenticator (with crucible's key set, so
// including the signature check) called directly: the floor of a review
// while that library is the judge of validity.
func BenchmarkAuthenticatorAlone(b *testing.B) {
	f := renderedFixture(b)
	if err := f.srv.current.Load().providers[0].keys.Load(b.Context()); err != nil {
		b.Fatal(err)
	}
	tokens := make([]string, 256)
	for i := range tokens {
		tokens[i] = hubToken(b, with(hubClaims(), map[string]any{"jti": fmt.Sprintf("alone-%d", i)}))
	}
	authn := f.srv.current.Load().providers[0].authn
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, ok, err := authn.AuthenticateToken(b.Context(), tokens[i%len(tokens)]); !ok || err != nil {
			b.Fatalf("authenticate: %v %v", ok, err)
		}
		i++
	}
}

// BenchmarkReviewReport runs BenchmarkReview and its baselines side by side
// (testing.Benchmark, the -benchtime of the run) and writes the
// webhook-handler rows of `make bench`.
func BenchmarkReviewReport(b *testing.B) {
	for b.Loop() {
		review := testing.Benchmark(BenchmarkReview)
		verify := testing.Benchmark(BenchmarkVerifyAlone)
		library := testing.Benchmark(BenchmarkAuthenticatorAlone)
		repeated := testing.Benchmark(BenchmarkReviewRepeated)
		withCEL := testing.Benchmark(BenchmarkReviewCEL)
		for name, r := range map[string]testing.BenchmarkResult{"review": review, "verify": verify, "library": library, "repeated": repeated, "cel": withCEL} {
			if r.N == 0 {
				b.Fatalf("%s benchmark failed", name)
			}
			b.Logf("%-8s %s %s", name, r, r.MemString())
		}
		us := func(r testing.BenchmarkResult) float64 { return float64(r.NsPerOp()) / 1e3 }
		method := fmt.Sprintf("httptest-free handler call (Server.Handler().ServeHTTP) per review, keys loaded, the configuration render.WebhookConfig writes (no CEL), "+
			"%d distinct RS256 2048-bit tokens cycled through a %d-entry cache (every review a miss); baseline: go-jose's RS256 check of one token; "+
			"testing.Benchmark, one goroutine", benchTokens, defaultVerifiedCacheSize)
		handler := benchreport.Record{ID: "webhook-handler", Case: "distinct tokens", Unit: "µs/review", Value: us(review), LowerIsBetter: true,
			Goal: "≤ 60 µs and ≤ 100 allocs", Method: method, Extra: map[string]float64{
				"allocs": float64(review.AllocsPerOp()), "bytes": float64(review.AllocedBytesPerOp()),
				"verify_allocs": float64(verify.AllocsPerOp()), "library_us": us(library), "library_allocs": float64(library.AllocsPerOp()),
			}}.WithBaseline("RS256 verify alone", us(verify))
		handler = handler.Judged(handler.Value <= 60 && review.AllocsPerOp() <= 100)
		rows := []benchreport.Record{
			handler,
			{ID: "webhook-handler", Case: "k8s.io/apiserver's authenticator alone (the floor, reported)", Unit: "µs/review", Value: us(library), LowerIsBetter: true,
				Goal: "report", Method: "the library's AuthenticateToken with crucible's key set, same tokens and configuration",
				Extra: map[string]float64{"allocs": float64(library.AllocsPerOp())}},
			{ID: "webhook-handler", Case: "repeated token (verified-token cache, reported)", Unit: "µs/review", Value: us(repeated), LowerIsBetter: true,
				Goal: "report", Method: "one token asked again and again, as a spoke's several API servers do",
				Extra: map[string]float64{"allocs": float64(repeated.AllocsPerOp())}},
			{ID: "webhook-handler", Case: "distinct tokens, CEL rule and mapping configured (reported)", Unit: "µs/review", Value: us(withCEL), LowerIsBetter: true,
				Goal: "report", Method: "as distinct tokens, with one claimValidationRule and one CEL extra mapping",
				Extra: map[string]float64{"allocs": float64(withCEL.AllocsPerOp())}},
		}
		for _, r := range rows {
			if err := benchreport.Append(r); err != nil {
				b.Fatal(err)
			}
		}
	}
}

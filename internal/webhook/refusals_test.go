package webhook

import (
	"bufio"
	"log/slog"
	"strings"
	"testing"

	jose "github.com/go-jose/go-jose/v4"

	"crucible.dev/crucible/internal/jwt/jwttest"
)

// logAtDebug makes the fixture's server log every level, for tests that
// read per-review reasons.
func (f *fixture) logAtDebug() {
	f.srv.log = slog.New(slog.NewTextHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// infoLines are the captured log lines at Info or above.
func infoLines(logs string) []string {
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(logs))
	for sc.Scan() {
		if !strings.Contains(sc.Text(), "level=DEBUG") {
			lines = append(lines, sc.Text())
		}
	}
	return lines
}

// A flood of forged tokens does not write one Info line per token: the
// first refusal is summed up at once, the rest in one line when the interval
// has passed. Per-review reasons stay available at Debug.
func TestForgedTokenFloodLogsNoLinePerToken(t *testing.T) {
	const flood = 300
	f := newFixture(t, defaultProvider()) // logs at Info, the default level
	f.review(t, v1, hubToken(t, hubClaims()))
	forged := testKeys()[1] // not published: a forger's key under the real kid
	kinds := []func(i int) string{
		func(int) string { return jwttest.Sign(t, forged, jose.RS256, "k1", hubClaims(), nil) },
		func(i int) string { return "not-a-jwt-" + strings.Repeat("x", i%50) },
		func(int) string {
			return hubToken(t, with(hubClaims(), map[string]any{"sub": "system:serviceaccount:crucible:intruder"}))
		},
	}
	for i := range flood {
		if got := f.review(t, v1, kinds[i%len(kinds)](i)); got.Authenticated {
			t.Fatalf("forged token %d authenticated", i)
		}
	}
	lines := infoLines(f.logs.String())
	var summaries []string
	for _, l := range lines {
		if strings.Contains(l, "token review") && !strings.Contains(l, "token reviews refused") {
			t.Errorf("per-review line at Info: %s", l)
		}
		if strings.Contains(l, `msg="token reviews refused"`) {
			summaries = append(summaries, l)
		}
	}
	if len(summaries) != 1 || !strings.Contains(summaries[0], "rejected=1 errors=0 bad_requests=0") {
		t.Fatalf("summary lines = %q, want one for the first refusal", summaries)
	}
	if len(lines) > 4 { // the summary and the key fetch; nothing that grows with the flood
		t.Errorf("%d Info lines for %d forged tokens:\n%s", len(lines), flood, strings.Join(lines, "\n"))
	}

	f.clock.Step(refusalSummaryInterval)
	f.review(t, v1, "one-more")
	summaries = nil
	for _, l := range infoLines(f.logs.String()) {
		if strings.Contains(l, `msg="token reviews refused"`) {
			summaries = append(summaries, l)
		}
	}
	if len(summaries) != 2 || !strings.Contains(summaries[1], "rejected=300 errors=0 bad_requests=0") {
		t.Errorf("after the interval: summaries = %q, want a second one counting the other %d", summaries, flood)
	}
}

// Malformed TokenReview requests are refusals too: Debug each, summed up.
func TestBadRequestFloodLogsNoLinePerRequest(t *testing.T) {
	f := newFixture(t, defaultProvider())
	for range 100 {
		if code, _ := post(t, f.h, "/", []byte("token=abc")); code != 400 {
			t.Fatalf("status %d, want 400", code)
		}
	}
	lines := infoLines(f.logs.String())
	if len(lines) != 1 || !strings.Contains(lines[0], "rejected=0 errors=0 bad_requests=1") {
		t.Errorf("Info lines = %q, want only the first summary", lines)
	}
}

// At Debug every refusal has its line with the reason.
func TestRefusalsAtDebug(t *testing.T) {
	f := newFixture(t, defaultProvider())
	f.logAtDebug()
	for range 5 {
		f.review(t, v1, jwttest.Sign(t, testKeys()[1], jose.RS256, "k1", hubClaims(), nil))
	}
	n := strings.Count(f.logs.String(), `level=DEBUG msg="token review" provider=hub result=rejected`)
	if n != 5 {
		t.Errorf("%d debug lines for 5 refusals:\n%s", n, f.logs)
	}
}

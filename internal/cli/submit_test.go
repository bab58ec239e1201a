package cli

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"crucible.dev/crucible/internal/api/apiv1"
)

// submitServer answers the n-th POST /api/pods with answers[n] (the last
// one repeats), recording each request's Idempotency-Key and body.
type submitServer struct {
	mu      sync.Mutex
	answers []func(w http.ResponseWriter)
	keys    []string
	bodies  []string
}

func (s *submitServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	n := len(s.keys)
	s.keys = append(s.keys, strings.Join(r.Header.Values(apiv1.IdempotencyKeyHeader), ","))
	s.bodies = append(s.bodies, string(body))
	s.mu.Unlock()
	if r.Method != http.MethodPost || r.URL.Path != "/api/pods" || r.Header.Get(apiv1.ClientHeader) == "" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	s.answers[min(n, len(s.answers)-1)](w)
}

func (s *submitServer) sent() ([]string, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.keys...), append([]string(nil), s.bodies...)
}

// cut drops the connection without an answer (a controller killed mid-submit).
func cut(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		conn.Close()
	}
}

func answer(code int, contentType, body string, header ...string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(code)
		io.WriteString(w, body)
	}
}

var created = answer(http.StatusCreated, "application/json", `{"id":"turn-abc","cluster":"wharf","state":"pending"}`, apiv1.ReplayedHeader, "true")

func runSubmit(t *testing.T, s *submitServer, extra ...string) (string, string, error) {
	t.Helper()
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	var out, errOut bytes.Buffer
	args := append([]string{"submit", "--server", srv.URL, "--image", "busybox"}, extra...)
	err := Run(t.Context(), append(args, "--", "true"), &out, &errOut)
	return out.String(), errOut.String(), err
}

var cliKey = regexp.MustCompile(`^cli-[0-9a-f]{32}$`)

// A submit that got no answer (connection cut, then a 503) is sent again,
// byte for byte, with the same key; the replayed answer is the work pod.
func TestSubmitRetriesWithSameKey(t *testing.T) {
	s := &submitServer{answers: []func(http.ResponseWriter){
		cut,
		answer(http.StatusServiceUnavailable, "application/json", `{"error":"the store is unavailable; retry later"}`, "Retry-After", "0"),
		created,
	}}
	out, errOut, err := runSubmit(t, s)
	if err != nil || out != "turn-abc\n" {
		t.Fatalf("submit: %q, %v; stderr %s", out, err, errOut)
	}
	keys, bodies := s.sent()
	if len(keys) != 3 || !cliKey.MatchString(keys[0]) || keys[1] != keys[0] || keys[2] != keys[0] {
		t.Fatalf("keys sent %q, want one cli-<hex> key three times", keys)
	}
	if bodies[1] != bodies[0] || bodies[2] != bodies[0] || !strings.Contains(bodies[0], `"image":"busybox"`) {
		t.Errorf("bodies differ between sends: %q", bodies)
	}
	for _, want := range []string{"sending the submit again with the same Idempotency-Key", "(HTTP 503)",
		"turn-abc: the controller had made it already (Idempotency-Key " + keys[0] + ")"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	// Another invocation is another submit: a new key.
	s2 := &submitServer{answers: []func(http.ResponseWriter){created}}
	if _, _, err := runSubmit(t, s2); err != nil {
		t.Fatal(err)
	}
	if keys2, _ := s2.sent(); len(keys2) != 1 || !cliKey.MatchString(keys2[0]) || keys2[0] == keys[0] {
		t.Errorf("second invocation's key %q (first %q), want a fresh one", keys2, keys[0])
	}
}

// --idempotency-key is sent as given; a malformed one is refused before
// anything is sent.
func TestSubmitIdempotencyKeyFlag(t *testing.T) {
	s := &submitServer{answers: []func(http.ResponseWriter){created}}
	if _, _, err := runSubmit(t, s, "--idempotency-key", "nightly-2026-11-30"); err != nil {
		t.Fatal(err)
	}
	if keys, _ := s.sent(); !cmp.Equal(keys, []string{"nightly-2026-11-30"}) {
		t.Errorf("keys sent %q", keys)
	}
	for key, want := range map[string]string{
		"":                       "--idempotency-key: empty; send a key or no header",
		"ключ":                   "--idempotency-key: byte 0 is not printable ASCII",
		strings.Repeat("k", 256): "--idempotency-key: 256 bytes; at most 255",
	} {
		s := &submitServer{answers: []func(http.ResponseWriter){created}}
		_, _, err := runSubmit(t, s, "--idempotency-key", key)
		if err == nil || err.Error() != want {
			t.Errorf("key %q: %v, want %q", key, err, want)
		}
		if keys, _ := s.sent(); len(keys) != 0 {
			t.Errorf("key %q: sent %d requests", key, len(keys))
		}
	}
}

// The controller's own verdicts are answers, sent once: a dispatch that
// failed (its JSON 502), a mismatch (422). A proxy's 502 or 504 page is no
// answer and is sent again.
func TestSubmitRetriesOnlyWithoutAnswer(t *testing.T) {
	tests := []struct {
		name    string
		first   func(http.ResponseWriter)
		sends   int
		wantErr string
	}{
		{"controller's 502", answer(http.StatusBadGateway, "application/json", `{"error":"dispatch to wharf failed: the spoke is down"}`),
			1, "dispatch to wharf failed: the spoke is down (HTTP 502)"},
		{"mismatch", answer(http.StatusUnprocessableEntity, "application/json", `{"error":"Idempotency-Key was used for work pod turn-x with a different request"}`),
			1, "Idempotency-Key was used for work pod turn-x with a different request (HTTP 422)"},
		{"refusal", answer(http.StatusForbidden, "application/json", `{"error":"forbidden"}`), 1, "forbidden (HTTP 403)"},
		{"proxy's 502", answer(http.StatusBadGateway, "text/html", "<html>Bad Gateway</html>"), 2, ""},
		{"proxy's 504", answer(http.StatusGatewayTimeout, "text/plain", "upstream timed out"), 2, ""},
		{"502 with a non-error JSON", answer(http.StatusBadGateway, "application/json", `{"message":"upstream"}`), 2, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &submitServer{answers: []func(http.ResponseWriter){tc.first, created}}
			out, _, err := runSubmit(t, s)
			keys, _ := s.sent()
			if len(keys) != tc.sends {
				t.Fatalf("%d sends, want %d", len(keys), tc.sends)
			}
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Errorf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || out != "turn-abc\n" || keys[1] != keys[0] {
				t.Errorf("out %q, %v, keys %q", out, err, keys)
			}
		})
	}
}

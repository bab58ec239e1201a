package mirror

import (
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/rest"
	testingclock "k8s.io/utils/clock/testing"

	"crucible.dev/crucible/internal/fleet"
	"crucible.dev/crucible/internal/metrics"
	"crucible.dev/crucible/internal/profile"
)

const (
	hubToken    = "hub-sa-token"
	externalURL = "https://crucible.example.com"
	mirrorJWKS  = externalURL + jwksPath

	hubDiscovery = `{"issuer":"https://kubernetes.default.svc","jwks_uri":"https://10.0.0.1:6443/openid/v1/jwks",` +
		`"response_types_supported":["id_token"],"subject_types_supported":["public"],` +
		`"id_token_signing_alg_values_supported":["RS256"]}`
	hubJWKS = `{"keys":[{"use":"sig","kty":"RSA","kid":"k1","alg":"RS256","n":"sXch","e":"AQAB"}]}`
)

// answer is what the fake hub sends for one path.
type answer struct {
	status int
	body   string
	// truncate announces a longer body than it sends and drops the
	// connection: a transport failure after the status line, which the HTTP
	// client does not retry, so every fetch is exactly one hub request.
	truncate bool
	// location, with a 3xx status, is the redirect's target.
	location string
}

var (
	up   = answer{status: http.StatusOK}
	down = answer{status: http.StatusOK, body: `{"hub-internal-detail"`, truncate: true}
)

// fakeHub is the hub kube-apiserver's discovery endpoints over real TLS. It
// requires the service account's bearer token and counts requests per path,
// refused ones too.
type fakeHub struct {
	srv       *httptest.Server
	tokenFile string // the client's, written by client

	mu      sync.Mutex
	token   string // the one bearer token the hub accepts
	answers map[string]answer
	hits    map[string]int
	gate    chan struct{} // when set, requests wait until it is closed
}

func newFakeHub(t *testing.T) *fakeHub {
	t.Helper()
	h := &fakeHub{
		answers: map[string]answer{
			discoveryPath: {status: http.StatusOK, body: hubDiscovery},
			jwksPath:      {status: http.StatusOK, body: hubJWKS},
		},
		hits:  map[string]int{},
		token: hubToken,
	}
	h.srv = httptest.NewTLSServer(http.HandlerFunc(h.serve))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *fakeHub) serve(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.hits[r.URL.Path]++
	authorized := r.Header.Get("Authorization") == "Bearer "+h.token
	a, ok := h.answers[r.URL.Path]
	gate := h.gate
	h.mu.Unlock()
	if !authorized {
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	if gate != nil {
		select {
		case <-gate:
		case <-r.Context().Done():
			return
		}
	}
	if !ok {
		http.NotFound(w, r)
		return
	}
	if a.truncate {
		w.Header().Set("Content-Length", strconv.Itoa(len(a.body)+100))
		_, _ = io.WriteString(w, a.body)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	}
	if a.location != "" {
		w.Header().Set("Location", a.location)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a.status)
	_, _ = io.WriteString(w, a.body)
}

// set makes the hub answer path with a; a zero body keeps the good one.
func (h *fakeHub) set(path string, a answer) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if a.body == "" {
		a.body = map[string]string{discoveryPath: hubDiscovery, jwksPath: hubJWKS}[path]
	}
	h.answers[path] = a
}

func (h *fakeHub) count(path string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.hits[path]
}

// hold makes requests wait until the returned function is called.
func (h *fakeHub) hold() (release func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.gate = make(chan struct{})
	return sync.OnceFunc(func() { close(h.gate) })
}

// client is built as the controller builds it (newMirror): client-go with
// the CA and a token file, through fleet.TokenFileConfig.
func (h *fakeHub) client(t *testing.T) *http.Client {
	t.Helper()
	dir := t.TempDir()
	h.tokenFile = filepath.Join(dir, "token")
	if err := os.WriteFile(h.tokenFile, []byte(hubToken), 0o600); err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca.crt")
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: h.srv.Certificate().Raw})
	if err := os.WriteFile(caFile, ca, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := fleet.TokenFileConfig(h.srv.URL, caFile, h.tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	c, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatalf("build hub client: %v", err)
	}
	return c
}

// rotate writes token into the client's token file, as the kubelet does,
// and makes the hub accept it and no other: the old token revoked.
func (h *fakeHub) rotate(t *testing.T, token string) {
	t.Helper()
	if err := os.WriteFile(h.tokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.token = token
}

func newFakeClock() *testingclock.FakeClock {
	return testingclock.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
}

// newTestMirror returns a mirror of hub on clock, with options edited by edit.
func newTestMirror(t *testing.T, hub *fakeHub, clock *testingclock.FakeClock, edit func(*Options)) *Mirror {
	t.Helper()
	d := profile.Default().Mirror
	opts := Options{
		Upstream:    hub.client(t),
		UpstreamURL: hub.srv.URL,
		ExternalURL: externalURL,
		TTL:         d.TTL.Duration,
		MaxStale:    d.MaxStale.Duration,
		Now:         clock.Now,
	}
	if edit != nil {
		edit(&opts)
	}
	m, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return m
}

// reply is what a client of the mirror sees.
type reply struct {
	status int
	header http.Header
	body   string
}

// do sends one request to m. It does not fail the test, so goroutines may
// call it.
func do(t *testing.T, m *Mirror, method, target string) reply {
	rec := httptest.NewRecorder()
	m.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), method, target, nil))
	res := rec.Result()
	body, _ := io.ReadAll(res.Body)
	return reply{status: res.StatusCode, header: res.Header, body: string(body)}
}

// waitFor polls cond until it holds or ten seconds pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// fetchCounts reads crucible_mirror_upstream_fetches_total for a document.
func fetchCounts(document string) map[string]float64 {
	counts := map[string]float64{}
	for _, result := range []string{resultOK, resultError, resultInvalid} {
		counts[result] = testutil.ToFloat64(metrics.MirrorUpstreamFetches.WithLabelValues(document, result))
	}
	return counts
}

// responseCounts reads crucible_mirror_responses_total for a document.
func responseCounts(document string) map[string]float64 {
	counts := map[string]float64{}
	for _, src := range []source{sourceFresh, sourceStale, sourceUnavailable} {
		counts[string(src)] = testutil.ToFloat64(metrics.MirrorResponses.WithLabelValues(document, string(src)))
	}
	return counts
}

// delta subtracts before from after, per key.
func delta(before, after map[string]float64) map[string]float64 {
	d := map[string]float64{}
	for k, v := range after {
		d[k] = v - before[k]
	}
	return d
}

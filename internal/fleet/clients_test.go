package fleet

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus/testutil"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"crucible.dev/crucible/internal/metrics"

	"crucible.dev/crucible/internal/profile"
)

const selfSubjectReviewPath = "/apis/authentication.k8s.io/v1/selfsubjectreviews"

// jwtWithExp builds an unsigned-looking compact JWS whose payload carries exp.
func jwtWithExp(t testing.TB, exp int64) string {
	t.Helper()
	enc := base64.RawURLEncoding
	payload, err := json.Marshal(map[string]any{"sub": "system:serviceaccount:crucible:crucible-controller", "aud": []string{"wharf"}, "exp": exp})
	if err != nil {
		t.Fatal(err)
	}
	return enc.EncodeToString([]byte(`{"alg":"RS256","kid":"k"}`)) + "." + enc.EncodeToString(payload) + "." + enc.EncodeToString([]byte("sig"))
}

// errString is err's message, "<nil>" for none, so a table can want either.
func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// fakeSpoke is a TLS server that answers SelfSubjectReviews like a spoke's
// API server: 201 for the accepted token, 401 for any other, or a fixed
// status when status is set.
type fakeSpoke struct {
	srv    *httptest.Server
	caFile string

	mu       sync.Mutex
	accept   string // the token answered with 201
	status   int    // when non-zero, the answer to every request
	seen     []string
	agents   []string
	requests int
}

func newFakeSpoke(t *testing.T) *fakeSpoke {
	t.Helper()
	s := &fakeSpoke{}
	s.srv, s.caFile = newTLSServer(t, http.HandlerFunc(s.serve))
	return s
}

// newTLSServer starts a TLS server of h and returns it with the file of its
// CA certificate, as a cluster entry's ca_file names it.
func newTLSServer(t *testing.T, h http.Handler) (*httptest.Server, string) {
	t.Helper()
	srv := httptest.NewTLSServer(h)
	t.Cleanup(srv.Close)
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(caFile, ca, 0o600); err != nil {
		t.Fatal(err)
	}
	return srv, caFile
}

func (s *fakeSpoke) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests++
	s.seen = append(s.seen, r.Header.Get("Authorization"))
	s.agents = append(s.agents, r.Header.Get("User-Agent"))
	if r.Method != http.MethodPost || r.URL.Path != selfSubjectReviewPath {
		writeStatus(w, http.StatusNotFound)
		return
	}
	status := s.status
	if status == 0 {
		status = http.StatusUnauthorized
		if r.Header.Get("Authorization") == "Bearer "+s.accept {
			status = http.StatusCreated
		}
	}
	if status != http.StatusCreated {
		writeStatus(w, status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(authenticationv1.SelfSubjectReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "authentication.k8s.io/v1", Kind: "SelfSubjectReview"},
		Status: authenticationv1.SelfSubjectReviewStatus{UserInfo: authenticationv1.UserInfo{
			Username: "hub:system:serviceaccount:crucible:crucible-controller",
		}},
	})
}

func writeStatus(w http.ResponseWriter, code int) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(metav1.Status{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
		Status:   metav1.StatusFailure,
		Message:  http.StatusText(code),
		Code:     int32(code),
	})
}

func (s *fakeSpoke) set(accept string, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.accept, s.status = accept, status
}

func (s *fakeSpoke) seenTokens() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.seen...)
}

// writeToken replaces the token file the way the kubelet's atomic writer
// does: a new file renamed over the old one.
func writeToken(t *testing.T, path, token string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func entryFor(t *testing.T, name string, s *fakeSpoke, token string) profile.ClusterEntry {
	t.Helper()
	tokenFile := filepath.Join(t.TempDir(), "token")
	writeToken(t, tokenFile, token)
	return profile.ClusterEntry{
		Name: name, Server: s.srv.URL, CAFile: s.caFile, TokenFile: tokenFile,
		LoopNamespace: "loops", TurnServiceAccount: "crucible-turn",
		IngestURL: "https://crucible.example.com", IngestAudience: "crucible-ingest",
		QPS: profile.DefaultQPS, Burst: profile.DefaultBurst,
	}
}

func newClientsT(t *testing.T, entries ...profile.ClusterEntry) *Clients {
	t.Helper()
	cs, err := NewClients(entries)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func TestNewClientsConfig(t *testing.T) {
	s := newFakeSpoke(t)
	wharf := entryFor(t, "wharf", s, "token-a")
	dock := entryFor(t, "dock", s, "token-b")
	dock.QPS, dock.Burst = 7, 9
	cs := newClientsT(t, wharf, dock)

	var names []string
	for _, c := range cs.All() {
		names = append(names, c.Entry.Name)
	}
	if diff := cmp.Diff([]string{"wharf", "dock"}, names); diff != "" {
		t.Errorf("All() order (-want +got):\n%s", diff)
	}
	c, ok := cs.Get("dock")
	if !ok {
		t.Fatal("Get(dock) not found")
	}
	want := &rest.Config{
		Host:            s.srv.URL,
		TLSClientConfig: rest.TLSClientConfig{CAFile: s.caFile},
		QPS:             7,
		Burst:           9,
		UserAgent:       "crucible/dock",
		ContentConfig: rest.ContentConfig{ContentType: "application/vnd.kubernetes.protobuf",
			AcceptContentTypes: "application/vnd.kubernetes.protobuf,application/json"},
	}
	// BearerToken and BearerTokenFile stay empty: the token comes from the
	// file through WrapTransport (TestProbeTokenRotation checks it).
	if diff := cmp.Diff(want, c.Config, cmpopts.IgnoreUnexported(rest.Config{}, rest.TLSClientConfig{}), cmpopts.IgnoreFields(rest.Config{}, "WrapTransport")); diff != "" {
		t.Errorf("rest.Config (-want +got):\n%s", diff)
	}
	if c.Config.WrapTransport == nil {
		t.Error("no WrapTransport: nothing injects the token")
	}
	if _, ok := cs.Get("nope"); ok {
		t.Error("Get(nope) found a client")
	}
	// Before any probe, Health names the cluster only.
	if diff := cmp.Diff(Health{Cluster: "dock"}, c.Health()); diff != "" {
		t.Errorf("Health before a probe (-want +got):\n%s", diff)
	}

	// The server sees the cluster's user agent.
	s.set("token-b", 0)
	c.Probe(t.Context())
	s.mu.Lock()
	agent := s.agents[len(s.agents)-1]
	s.mu.Unlock()
	if !strings.HasPrefix(agent, "crucible/dock") {
		t.Errorf("User-Agent = %q, want crucible/dock", agent)
	}
}

func TestNewClientsErrors(t *testing.T) {
	s := newFakeSpoke(t)
	wharf := entryFor(t, "wharf", s, "t")
	missing := wharf
	missing.Name = "dock"
	missing.TokenFile = filepath.Join(t.TempDir(), "absent")
	empty := wharf
	empty.Name = "pier"
	empty.TokenFile = filepath.Join(t.TempDir(), "empty")
	writeToken(t, empty.TokenFile, "\n")
	tests := []struct {
		name    string
		entries []profile.ClusterEntry
		want    string
	}{
		{name: "duplicate", entries: []profile.ClusterEntry{wharf, wharf}, want: "cluster wharf: defined twice"},
		{name: "token file empty", entries: []profile.ClusterEntry{empty}, want: "cluster pier: read empty token from file \"" + empty.TokenFile + "\""},
		{name: "token file missing", entries: []profile.ClusterEntry{wharf, missing}, want: "cluster dock: failed to read token file \"" + missing.TokenFile + "\": open " + missing.TokenFile + ": no such file or directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs, err := NewClients(tt.entries)
			if cs != nil {
				t.Error("NewClients returned clients with an error")
			}
			if diff := cmp.Diff(tt.want, errString(err)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestProbe(t *testing.T) {
	const exp = 1900000000
	expiry := time.Unix(exp, 0).UTC()
	token := jwtWithExp(t, exp)
	tests := []struct {
		name      string
		status    int // 0: accept the token
		closed    bool
		token     string
		want      Health
		wantError bool
		wantUp    float64
		result    string
	}{
		{name: "201 accepted", token: token, want: Health{Reachable: true, CredentialsValid: true, TokenExpiry: &expiry}, wantUp: 1, result: "ok"},
		{name: "401 rejected", status: 401, token: token, want: Health{Reachable: true, TokenExpiry: &expiry}, wantError: true, result: "unauthorized"},
		{name: "403 anonymous", status: 403, token: token, want: Health{Reachable: true, TokenExpiry: &expiry}, wantError: true, result: "unauthorized"},
		{name: "500", status: 500, token: token, want: Health{TokenExpiry: &expiry}, wantError: true, result: "unreachable"},
		{name: "429", status: 429, token: token, want: Health{TokenExpiry: &expiry}, wantError: true, result: "unreachable"},
		{name: "404 other answer", status: 404, token: token, want: Health{Reachable: true, TokenExpiry: &expiry}, wantError: true, result: "error"},
		{name: "closed listener", closed: true, token: token, want: Health{TokenExpiry: &expiry}, wantError: true, result: "unreachable"},
		{name: "opaque token has no expiry", token: "not-a-jwt", want: Health{Reachable: true, CredentialsValid: true}, wantUp: 1, result: "ok"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newFakeSpoke(t)
			s.set(tt.token, tt.status)
			name := fmt.Sprintf("probe-%d", i)
			c, _ := newClientsT(t, entryFor(t, name, s, tt.token)).Get(name)
			if tt.closed {
				s.srv.Close()
			}
			probesBefore := testutil.ToFloat64(metrics.ClusterProbes.WithLabelValues(name, tt.result))

			got := c.Probe(t.Context())

			tt.want.Cluster = name
			opts := cmp.Options{cmpopts.IgnoreFields(Health{}, "CheckedAt", "LastError")}
			if diff := cmp.Diff(tt.want, got, opts); diff != "" {
				t.Errorf("Probe (-want +got):\n%s", diff)
			}
			if (got.LastError != "") != tt.wantError {
				t.Errorf("LastError = %q, want an error: %v", got.LastError, tt.wantError)
			}
			if strings.Contains(got.LastError, tt.token) && tt.token != "" {
				t.Errorf("LastError contains the token: %q", got.LastError)
			}
			if since := time.Since(got.CheckedAt); since < 0 || since > time.Minute || got.CheckedAt.Location() != time.UTC {
				t.Errorf("CheckedAt = %v, want now in UTC", got.CheckedAt)
			}
			if diff := cmp.Diff(got, c.Health()); diff != "" {
				t.Errorf("Health() differs from the probe's result (-probe +stored):\n%s", diff)
			}
			if up := testutil.ToFloat64(metrics.ClusterUp.WithLabelValues(name)); up != tt.wantUp {
				t.Errorf("crucible_cluster_up = %v, want %v", up, tt.wantUp)
			}
			if n := testutil.ToFloat64(metrics.ClusterProbes.WithLabelValues(name, tt.result)) - probesBefore; n != 1 {
				t.Errorf("crucible_cluster_probes_total{result=%q} rose by %v, want 1", tt.result, n)
			}
			wantExpiry := 0
			if tt.want.TokenExpiry != nil {
				wantExpiry = 1
				if v := testutil.ToFloat64(metrics.ClusterTokenExpiry.WithLabelValues(name)); v != exp {
					t.Errorf("crucible_cluster_token_expiry_timestamp_seconds = %v, want %v", v, exp)
				}
			}
			if n := countSeries(t, "crucible_cluster_token_expiry_timestamp_seconds", name); n != wantExpiry {
				t.Errorf("token expiry series for %s: %d, want %d", name, n, wantExpiry)
			}
		})
	}
}

// countSeries counts the series of metric with the given cluster label.
func countSeries(t *testing.T, metric, cluster string) int {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range families {
		if f.GetName() != metric {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "cluster" && l.GetValue() == cluster {
					n++
				}
			}
		}
	}
	return n
}

// TestProbeTokenRotation checks R-ID1 against client-go's cached file token
// source: after the file changes, the next 401 makes the client re-read it,
// and the request after that carries the new token, without a restart.
func TestProbeTokenRotation(t *testing.T) {
	oldToken, newToken := jwtWithExp(t, 1900000000), jwtWithExp(t, 1900003600)
	s := newFakeSpoke(t)
	s.set(oldToken, 0)
	e := entryFor(t, "rotating", s, oldToken)
	c, _ := newClientsT(t, e).Get("rotating")

	first := c.Probe(t.Context())

	// The kubelet rotates the token; the API server now accepts only the new one.
	writeToken(t, e.TokenFile, newToken)
	s.set(newToken, 0)
	second := c.Probe(t.Context()) // still the cached old token: 401
	third := c.Probe(t.Context())  // the 401 reset the cache: the new token

	if diff := cmp.Diff([]string{"Bearer " + oldToken, "Bearer " + oldToken, "Bearer " + newToken}, s.seenTokens()); diff != "" {
		t.Errorf("Authorization headers the server saw (-want +got):\n%s", diff)
	}
	oldExp, newExp := time.Unix(1900000000, 0).UTC(), time.Unix(1900003600, 0).UTC()
	want := []Health{
		{Cluster: "rotating", Reachable: true, CredentialsValid: true, TokenExpiry: &oldExp},
		{Cluster: "rotating", Reachable: true, CredentialsValid: false, TokenExpiry: &newExp},
		{Cluster: "rotating", Reachable: true, CredentialsValid: true, TokenExpiry: &newExp},
	}
	if diff := cmp.Diff(want, []Health{first, second, third}, cmpopts.IgnoreFields(Health{}, "CheckedAt", "LastError")); diff != "" {
		t.Errorf("probes (-want +got):\n%s", diff)
	}
}

func TestProbeLoop(t *testing.T) {
	up, down := newFakeSpoke(t), newFakeSpoke(t)
	up.set("a", 0)
	down.set("b", 401)
	cs := newClientsT(t, entryFor(t, "loop-up", up, "a"), entryFor(t, "loop-down", down, "b"))

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- cs.ProbeLoop(ctx, 20*time.Millisecond) }()

	// Wait for at least two rounds on both clusters.
	deadline := time.Now().Add(10 * time.Second)
	for {
		up.mu.Lock()
		n1 := up.requests
		up.mu.Unlock()
		down.mu.Lock()
		n2 := down.requests
		down.mu.Unlock()
		if n1 >= 2 && n2 >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("probes after 10s: %d and %d, want at least 2 each", n1, n2)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("ProbeLoop returned %v after cancel, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ProbeLoop did not return after cancel")
	}

	var got []Health
	for _, c := range cs.All() {
		got = append(got, c.Health())
	}
	want := []Health{
		{Cluster: "loop-up", Reachable: true, CredentialsValid: true},
		{Cluster: "loop-down", Reachable: true},
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(Health{}, "CheckedAt", "LastError")); diff != "" {
		t.Errorf("Health after the loop (-want +got):\n%s", diff)
	}
	if err := cs.ProbeLoop(t.Context(), 0); err == nil {
		t.Error("ProbeLoop(0) succeeded, want an error")
	}
}

func TestTokenExpiry(t *testing.T) {
	enc := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	tests := []struct {
		name  string
		token string
		want  time.Time // zero: no expiry
	}{
		{name: "exp", token: jwtWithExp(t, 1900000000), want: time.Unix(1900000000, 0).UTC()},
		{name: "trailing newline", token: jwtWithExp(t, 1900000000) + "\n", want: time.Unix(1900000000, 0).UTC()},
		{name: "padded payload", token: "e30." + base64.URLEncoding.EncodeToString([]byte(`{"exp":12}`)) + ".s", want: time.Unix(12, 0).UTC()},
		{name: "fractional exp", token: "e30." + enc(`{"exp":12.9}`) + ".s", want: time.Unix(12, 0).UTC()},
		{name: "no exp", token: "e30." + enc(`{"sub":"x"}`) + ".s"},
		{name: "exp not a number", token: "e30." + enc(`{"exp":"soon"}`) + ".s"},
		{name: "exp negative", token: "e30." + enc(`{"exp":-5}`) + ".s"},
		{name: "exp beyond year 9999", token: "e30." + enc(`{"exp":1e20}`) + ".s"},
		{name: "payload not JSON", token: "e30." + enc(`exp`) + ".s"},
		{name: "payload not base64", token: "e30.!!!.s"},
		{name: "two parts", token: "e30." + enc(`{"exp":12}`)},
		{name: "JSON serialization", token: `{"payload":"x"}`},
		{name: "empty", token: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := tokenExpiry([]byte(tt.token))
			if ok != !tt.want.IsZero() || !got.Equal(tt.want) {
				t.Errorf("tokenExpiry = %v, %v; want %v", got, ok, tt.want)
			}
		})
	}
	if _, ok := readTokenExpiry(filepath.Join(t.TempDir(), "absent")); ok {
		t.Error("readTokenExpiry of a missing file succeeded")
	}
}

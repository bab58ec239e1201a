package webhook

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	authv1 "k8s.io/api/authentication/v1"
	testingclock "k8s.io/utils/clock/testing"

	"crucible.dev/crucible/internal/metrics"
)

// stateConfig is the hub provider with maxKeyAge, persisting under a
// fresh state dir.
func stateConfig(t *testing.T, iss *testIssuer, maxKeyAge string) *Config {
	t.Helper()
	cfg, err := ParseConfig([]byte(configYAML(iss, defaultProvider()) + "  maxKeyAge: " + maxKeyAge + "\n"))
	if err != nil {
		t.Fatalf("parse config: %v", err)
	}
	return cfg
}

// startWebhook is a webhook process: a Server over cfg persisting in dir,
// on clock, logging into its own buffer.
func startWebhook(t *testing.T, iss *testIssuer, cfg *Config, dir string, clock *testingclock.FakeClock) *fixture {
	t.Helper()
	return startWebhookWith(t, iss, cfg, StateDir(dir), clock)
}

// startWebhookWith is startWebhook persisting in store.
func startWebhookWith(t *testing.T, iss *testIssuer, cfg *Config, store StateStore, clock *testingclock.FakeClock) *fixture {
	t.Helper()
	f := &fixture{iss: iss, clock: clock, logs: &syncBuffer{}}
	srv, err := NewServer(t.Context(), cfg, Options{Logger: slog.New(slog.NewTextHandler(f.logs, nil)), State: store, now: clock.Now})
	if err != nil {
		t.Fatalf("new server: %v", err)
	}
	f.srv, f.h = srv, srv.Handler()
	return f
}

// readiness is the hub provider's /readyz entry.
func readiness(t *testing.T, f *fixture) ProviderReadiness {
	t.Helper()
	body := f.srv.Ready(t.Context())
	if len(body.Providers) != 1 {
		t.Fatalf("readiness = %+v, want one provider", body)
	}
	return body.Providers[0]
}

func checkSource(t *testing.T, f *fixture, source string, age time.Duration) {
	t.Helper()
	pr := readiness(t, f)
	if !pr.Ready || pr.KeySource != source || pr.KeyAgeSeconds == nil || *pr.KeyAgeSeconds != int64(age/time.Second) {
		t.Errorf("readiness = %+v (age %v), want ready, source %s, age %v", pr, pr.KeyAgeSeconds, source, age)
	}
}

func unavailable(t *testing.T, got authv1.TokenReviewStatus) {
	t.Helper()
	if got.Authenticated || !strings.HasPrefix(got.Error, "crucible authn webhook: keys of provider hub unavailable: ") {
		t.Errorf("status = %+v, want status.error: keys unavailable", got)
	}
}

// TestPersistedKeysAfterRestart: keys fetched by one process verify in
// the next one while discovery fails, within maxKeyAge; then fresh keys
// replace them, in memory and on disk.
func TestPersistedKeysAfterRestart(t *testing.T) {
	iss, dir := newTestIssuer(t), t.TempDir()
	cfg := stateConfig(t, iss, "2h")
	clock := testingclock.NewFakeClock(time.Now().UTC().Truncate(time.Second))
	first := startWebhook(t, iss, cfg, dir, clock)
	checkStatus(t, first.review(t, v1, hubToken(t, hubClaims())), authenticatedHub)
	fetchedAt := clock.Now()
	checkFile(t, dir, fetchedAt)

	iss.set(func(ti *testIssuer) { ti.discoveryOff = true })
	clock.Step(time.Hour)
	second := startWebhook(t, iss, cfg, dir, clock)
	for range 2 {
		checkStatus(t, second.review(t, v1, hubToken(t, hubClaims())), authenticatedHub)
	}
	checkSource(t, second, sourcePersisted, time.Hour)
	if n := strings.Count(second.logs.String(), "verifying with persisted provider keys"); n != 1 {
		t.Errorf("persisted keys' use logged %d times, want once:\n%s", n, second.logs)
	}
	if logs := second.logs.String(); !strings.Contains(logs, "key_ids=[k1]") || strings.Contains(logs, `"n"`) || strings.Contains(logs, hubToken(t, hubClaims())[:20]) {
		t.Errorf("log of the persisted keys' use should name key ids only:\n%s", logs)
	}
	checkKeyAgeMetric(t, second, sourcePersisted, time.Hour)

	// The mirror is back: the next verification refetches in the
	// background, and fresh keys replace the persisted ones.
	iss.set(func(ti *testIssuer) { ti.discoveryOff = false })
	clock.Step(time.Minute)
	checkStatus(t, second.review(t, v1, hubToken(t, hubClaims())), authenticatedHub)
	waitFor(t, func() bool { return readiness(t, second).KeySource == sourceFetched })
	checkSource(t, second, sourceFetched, 0)
	checkFile(t, dir, clock.Now())
	checkKeyAgeMetric(t, second, sourceFetched, 0)

	// Past maxKeyAge, a restart during an outage has no keys.
	iss.set(func(ti *testIssuer) { ti.discoveryOff = true })
	clock.Step(2 * time.Hour)
	third := startWebhook(t, iss, cfg, dir, clock)
	unavailable(t, third.review(t, v1, hubToken(t, hubClaims())))
	if logs := third.logs.String(); !strings.Contains(logs, "ignored persisted provider keys") || !strings.Contains(logs, "older than maxKeyAge 2h0m0s") {
		t.Errorf("refused stale state not logged with its reason:\n%s", logs)
	}
}

// TestPersistedKeysExpireWhileServing: seeded keys stop verifying once
// they reach maxKeyAge, even in a process that has not restarted.
func TestPersistedKeysExpireWhileServing(t *testing.T) {
	iss, dir := newTestIssuer(t), t.TempDir()
	cfg := stateConfig(t, iss, "2h")
	clock := testingclock.NewFakeClock(time.Now())
	checkStatus(t, startWebhook(t, iss, cfg, dir, clock).review(t, v1, hubToken(t, hubClaims())), authenticatedHub)
	iss.set(func(ti *testIssuer) { ti.discoveryOff = true })
	clock.Step(time.Hour)
	f := startWebhook(t, iss, cfg, dir, clock)
	checkStatus(t, f.review(t, v1, hubToken(t, hubClaims())), authenticatedHub)
	clock.Step(time.Hour)
	unavailable(t, f.review(t, v1, hubToken(t, hubClaims())))
	if pr := readiness(t, f); pr.Ready || pr.KeySource != "" {
		t.Errorf("readiness with expired persisted keys = %+v, want not ready", pr)
	}
}

// TestMaxKeyAgeZero: a provider with maxKeyAge 0 writes nothing and
// trusts no file.
func TestMaxKeyAgeZero(t *testing.T) {
	iss, dir := newTestIssuer(t), t.TempDir()
	clock := testingclock.NewFakeClock(time.Now())
	checkStatus(t, startWebhook(t, iss, stateConfig(t, iss, "2h"), dir, clock).review(t, v1, hubToken(t, hubClaims())), authenticatedHub)
	data, err := os.ReadFile(filepath.Join(dir, "provider-hub.json"))
	if err != nil {
		t.Fatal(err)
	}
	iss.set(func(ti *testIssuer) { ti.discoveryOff = true })
	f := startWebhook(t, iss, stateConfig(t, iss, "0s"), dir, clock)
	unavailable(t, f.review(t, v1, hubToken(t, hubClaims())))
	iss.set(func(ti *testIssuer) { ti.discoveryOff = false })
	clock.Step(time.Minute)
	checkStatus(t, f.review(t, v1, hubToken(t, hubClaims())), authenticatedHub)
	if after, _ := os.ReadFile(filepath.Join(dir, "provider-hub.json")); string(after) != string(data) {
		t.Error("maxKeyAge 0 rewrote the state file")
	}
}

// TestHostileState: every state file that is not the provider's own,
// young and well formed is ignored with a log line naming why.
func TestHostileState(t *testing.T) {
	iss := newTestIssuer(t)
	cfg := stateConfig(t, iss, "2h")
	clock := testingclock.NewFakeClock(time.Now())
	good := goodState(t, iss, cfg, clock)
	edit := func(change func(p map[string]any)) func(t *testing.T, path string) {
		return func(t *testing.T, path string) {
			var p map[string]any
			if err := json.Unmarshal(good, &p); err != nil {
				t.Fatal(err)
			}
			change(p)
			data, _ := json.Marshal(p)
			writeFile(t, path, string(data))
		}
	}
	raw := func(data []byte) func(t *testing.T, path string) {
		return func(t *testing.T, path string) { writeFile(t, path, string(data)) }
	}
	tests := []struct {
		name   string
		write  func(t *testing.T, path string)
		reason string
	}{
		{"another provider", edit(func(p map[string]any) { p["provider"] = "other" }), `written for provider "other"`},
		{"another issuer", edit(func(p map[string]any) {
			p["issuer"] = "https://evil.example"
			p["discovery"] = map[string]string{"issuer": "https://evil.example"}
		}), `written for issuer "https://evil.example"`},
		{"another discovery URL", edit(func(p map[string]any) { p["discoveryURL"] = "https://evil.example/d" }), `written for discovery URL "https://evil.example/d"`},
		{"discovery names another issuer", edit(func(p map[string]any) { p["discovery"] = map[string]string{"issuer": "https://evil.example"} }), "discovery document does not name issuer"},
		{"older than maxKeyAge", edit(func(p map[string]any) { p["fetchedAt"] = clock.Now().Add(-2 * time.Hour) }), "older than maxKeyAge 2h0m0s"},
		{"fetched in the future", edit(func(p map[string]any) { p["fetchedAt"] = clock.Now().Add(time.Hour) }), "in the future"},
		{"no usable keys", edit(func(p map[string]any) { p["jwks"] = map[string]any{"keys": []any{}} }), "no usable signing keys"},
		{"unknown field", edit(func(p map[string]any) { p["trustMe"] = true }), `unknown field "trustMe"`},
		{"another version", edit(func(p map[string]any) { p["version"] = 2 }), "version 2, want 1"},
		{"truncated", raw(good[:len(good)/2]), "unexpected EOF"},
		{"not JSON", raw([]byte("keys: [k1]")), "invalid character"},
		{"trailing data", raw(append(append([]byte{}, good...), good...)), "data after the state object"},
		{"over the size limit", raw(append(append([]byte{}, good[:len(good)-1]...), []byte(`,"x":"`+strings.Repeat("a", MaxStateBytes)+`"}`)...)), "larger than 1048576 bytes"},
		{"symlink", func(t *testing.T, path string) {
			target := filepath.Join(t.TempDir(), "elsewhere.json")
			writeFile(t, target, string(good))
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
		}, "is a symlink"},
		{"directory", func(t *testing.T, path string) {
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}, "is not a regular file"},
		{"fifo", func(t *testing.T, path string) {
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
		}, "is not a regular file"},
	}
	iss.set(func(ti *testIssuer) { ti.discoveryOff = true })
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tt.write(t, filepath.Join(dir, "provider-hub.json"))
			f := startWebhook(t, iss, cfg, dir, clock)
			unavailable(t, f.review(t, v1, hubToken(t, hubClaims())))
			logs := f.logs.String()
			if strings.Count(logs, "ignored persisted provider keys") != 1 || !strings.Contains(logs, strings.ReplaceAll(tt.reason, `"`, `\"`)) {
				t.Errorf("want one line ignoring the state with reason %q:\n%s", tt.reason, logs)
			}
			if pr := readiness(t, f); pr.Ready {
				t.Errorf("readiness = %+v, want not ready", pr)
			}
		})
	}
}

// goodState is the state file a webhook writes for iss at clock's time.
func goodState(t *testing.T, iss *testIssuer, cfg *Config, clock *testingclock.FakeClock) []byte {
	t.Helper()
	dir := t.TempDir()
	checkStatus(t, startWebhook(t, iss, cfg, dir, clock).review(t, v1, hubToken(t, hubClaims())), authenticatedHub)
	data, err := os.ReadFile(filepath.Join(dir, "provider-hub.json"))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// checkFile: the provider's state file is private, names what it was
// fetched for, and was fetched at.
func checkFile(t *testing.T, dir string, at time.Time) {
	t.Helper()
	path := filepath.Join(dir, "provider-hub.json")
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode() != 0o600 {
		t.Errorf("state file mode = %v, want -rw-------", fi.Mode())
	}
	data, _ := os.ReadFile(path)
	p, keys, err := decodeState(data)
	if err != nil {
		t.Fatalf("decode the written state: %v", err)
	}
	if p.Provider != "hub" || p.Issuer != hubIssuer || !p.FetchedAt.Equal(at) || len(keys) != 1 || keys[0].KeyID != "k1" {
		t.Errorf("state = %+v with %d keys, want hub's k1 fetched at %v", p, len(keys), at)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*.tmp")); len(left) > 0 {
		t.Errorf("temp files left: %v", left)
	}
}

// checkKeyAgeMetric: a scrape reports the provider's key age under its
// source only.
func checkKeyAgeMetric(t *testing.T, f *fixture, source string, age time.Duration) {
	t.Helper()
	rec := httptest.NewRecorder()
	f.srv.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics = %d", rec.Code)
	}
	if got := testutil.ToFloat64(metrics.WebhookKeyAge.WithLabelValues("hub", source)); got != age.Seconds() {
		t.Errorf("key age (%s) = %v, want %v", source, got, age.Seconds())
	}
	if n := testutil.CollectAndCount(metrics.WebhookKeyAge); n != 1 {
		t.Errorf("key age series = %d, want 1", n)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

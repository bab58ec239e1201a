package webhook

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	authv1 "k8s.io/api/authentication/v1"

	"crucible.dev/crucible/internal/metrics"
)

// configFile writes config files with strictly increasing modification
// times, so a poll always sees the change whatever the file system's clock
// granularity.
type configFile struct {
	path  string
	mtime time.Time
}

func newConfigFile(t *testing.T, content string) *configFile {
	t.Helper()
	c := &configFile{path: filepath.Join(t.TempDir(), "webhook.yaml"), mtime: time.Now()}
	c.write(t, content)
	return c
}

func (c *configFile) write(t *testing.T, content string) {
	t.Helper()
	writeFile(t, c.path, content)
	c.mtime = c.mtime.Add(time.Second)
	if err := os.Chtimes(c.path, c.mtime, c.mtime); err != nil {
		t.Fatal(err)
	}
}

// reloadFixture is a fixture built from a file, with its Reloader.
func reloadFixture(t *testing.T) (*fixture, *configFile, *Reloader) {
	t.Helper()
	iss := newTestIssuer(t)
	file := newConfigFile(t, configYAML(iss, defaultProvider()))
	cfg, err := LoadConfig(file.path)
	if err != nil {
		t.Fatal(err)
	}
	f := newFixtureFor(t, iss, cfg)
	return f, file, &Reloader{Path: file.path, Server: f.srv, Logger: slog.New(slog.NewTextHandler(f.logs, nil))}
}

func TestReloadAppliesChangedFile(t *testing.T) {
	f, file, r := reloadFixture(t)
	served := f.srv.Config()
	r.Check(t.Context())
	if f.srv.Config() != served {
		t.Fatalf("an unchanged file was reloaded")
	}

	newSub := "system:serviceaccount:crucible:crucible-collector"
	token := hubToken(t, with(hubClaims(), map[string]any{"sub": newSub}))
	checkStatus(t, f.review(t, v1, token), rejectedStatus)

	file.write(t, configYAML(f.iss, testProvider{subjects: []string{controllerSub, newSub}, prefix: "hub:"}))
	r.Check(t.Context())

	want := authv1.TokenReviewStatus{Authenticated: true, User: hubUser()}
	want.User.Username = "hub:" + newSub
	checkStatus(t, f.review(t, v1, token), want)
	if got := f.iss.jwksFetches.Load(); got != 1 {
		t.Errorf("JWKS fetched %d times, want 1: keys carry over a reload", got)
	}
	if got := testutil.ToFloat64(metrics.WebhookConfigLastReloadSuccess); got != 1 {
		t.Errorf("last reload success = %v, want 1", got)
	}
}

func TestReloadKeepsServingOnBrokenFile(t *testing.T) {
	f, file, r := reloadFixture(t)
	good := configYAML(f.iss, defaultProvider())
	failures := testutil.ToFloat64(metrics.WebhookConfigReloadFailures)

	tests := []struct {
		name    string
		content string
	}{
		{"YAML syntax", "providers: ["},
		{"invalid", "providers: []"},
		{"CEL expression of the wrong type", good + "  userValidationRules: [{expression: \"user.username\"}]\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file.write(t, tt.content)
			r.Check(t.Context())
			r.Check(t.Context()) // the same broken content is not retried

			checkStatus(t, f.review(t, v1, hubToken(t, hubClaims())), authenticatedHub)
			if got := testutil.ToFloat64(metrics.WebhookConfigLastReloadSuccess); got != 0 {
				t.Errorf("last reload success = %v, want 0", got)
			}
			if got := testutil.ToFloat64(metrics.WebhookConfigReloadFailures) - failures; got != 1 {
				t.Errorf("reload failures rose by %v, want 1", got)
			}
			failures++

			file.write(t, good)
			r.Check(t.Context())
			if got := testutil.ToFloat64(metrics.WebhookConfigLastReloadSuccess); got != 1 {
				t.Errorf("after restoring the file, last reload success = %v, want 1", got)
			}
		})
	}
}

func TestReloadMissingFileLoggedOnce(t *testing.T) {
	_, file, r := reloadFixture(t)
	failures := testutil.ToFloat64(metrics.WebhookConfigReloadFailures)
	if err := os.Remove(file.path); err != nil {
		t.Fatal(err)
	}
	r.Check(t.Context())
	r.Check(t.Context())
	if got := testutil.ToFloat64(metrics.WebhookConfigReloadFailures) - failures; got != 1 {
		t.Errorf("reload failures rose by %v, want 1", got)
	}
}

func TestReloaderStart(t *testing.T) {
	f, file, r := reloadFixture(t)
	r.Interval = 10 * time.Millisecond
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Start(ctx) }()

	served := f.srv.Config()
	file.write(t, configYAML(f.iss, testProvider{subjects: []string{controllerSub, "x"}, prefix: "hub:"}))
	deadline := time.Now().Add(5 * time.Second)
	for f.srv.Config() == served && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Start returned %v, want nil on cancel", err)
	}
	if f.srv.Config() == served {
		t.Errorf("the changed file was not applied within 5s")
	}
	if ready, _ := f.srv.current.Load().providers[0].keys.Status(); !ready {
		t.Errorf("Start did not fetch the provider's keys")
	}
}

// TestReloaderAppliesOnSIGHUP: a SIGHUP to the process makes the webhook
// apply a changed file at once, an hour before its next poll.
func TestReloaderAppliesOnSIGHUP(t *testing.T) {
	// Held for the whole test, so a SIGHUP sent before the Reloader listens
	// is not fatal to the test binary; it changes nothing by itself.
	guard := make(chan os.Signal, 1)
	signal.Notify(guard, syscall.SIGHUP)
	defer signal.Stop(guard)

	f, file, r := reloadFixture(t)
	r.Interval = time.Hour
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Start(ctx) }()

	served := f.srv.Config()
	file.write(t, configYAML(f.iss, testProvider{subjects: []string{controllerSub, "x"}, prefix: "hub:"}))
	deadline := time.Now().Add(5 * time.Second)
	for f.srv.Config() == served && time.Now().Before(deadline) {
		if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil { // again until Start listens
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Start returned %v, want nil on cancel", err)
	}
	if f.srv.Config() == served {
		t.Errorf("the changed file was not applied on SIGHUP within 5s")
	}
}

// TestReviewsInFlightSurviveReloads applies configurations while reviews
// run: every review must be answered from a whole configuration.
func TestReviewsInFlightSurviveReloads(t *testing.T) {
	f := newFixture(t, defaultProvider())
	configs := make([]*Config, 2)
	for i, extra := range []string{"a", "b"} {
		cfg, err := ParseConfig([]byte(configYAML(f.iss, testProvider{subjects: []string{controllerSub, extra}, prefix: "hub:"})))
		if err != nil {
			t.Fatal(err)
		}
		configs[i] = cfg
	}
	token := hubToken(t, hubClaims())

	var wg sync.WaitGroup
	errs := make(chan error, 400)
	for range 4 {
		wg.Go(func() {
			for range 100 {
				status, err := f.tryReview(v1, token)
				if err == nil && !status.Authenticated {
					err = fmt.Errorf("review not authenticated during a reload: %+v", status)
				}
				if err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range 20 {
		if err := f.srv.Apply(t.Context(), configs[i%2]); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"

	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
)

// TestWebhookRestartDuringControllerOutage: with every controller process
// stopped, wharf's webhook killed and started again with the same
// arguments still accepts a fresh controller token, with the keys it
// persisted; persisted keys older than maxKeyAge are refused, with the
// reason logged; the controller back, fresh keys replace them.
func TestWebhookRestartDuringControllerOutage(t *testing.T) {
	s := ownStack(t, devstack.Options{Crucible: devstacktest.BuildCrucible, Spokes: []devstack.SpokeOptions{{Name: "wharf"}}})
	const spoke, webhookProc = "wharf", "crucible-webhook-wharf"
	wharf := s.Spoke(spoke)
	stateFile := filepath.Join(s.Federation.WebhookStateDirs[spoke], "provider-hub.json")
	started := readState(t, stateFile).FetchedAt

	if err := s.KillProcess("crucible-controller"); err != nil {
		t.Fatal(err)
	}
	if err := s.KillProcess(webhookProc); err != nil {
		t.Fatal(err)
	}
	if err := s.RestartProcess(t.Context(), webhookProc, s.WebhookReady(spoke)); err != nil {
		t.Fatalf("restart wharf's webhook with the controller down: %v", err)
	}
	if got, err := whoami(t.Context(), s, wharf, hubToken(t, s, devstack.HubServiceAccount, spoke)); err != nil || got != controllerUser {
		t.Fatalf("fresh controller token after the webhook's restart: whoami = %q, %v; want %q", got, err, controllerUser)
	}
	if r := webhookReadiness(t, s, spoke); r.KeySource != "persisted" {
		t.Errorf("readyz = %+v, want keys persisted", r)
	}
	checkLogged(t, s, webhookProc, "verifying with persisted provider keys")

	// The persisted keys aged past maxKeyAge (24h): refused.
	if err := s.KillProcess(webhookProc); err != nil {
		t.Fatal(err)
	}
	ageState(t, stateFile, 25*time.Hour)
	if err := s.RestartProcess(t.Context(), webhookProc, webhookServing(s, spoke)); err != nil {
		t.Fatalf("restart wharf's webhook with stale state: %v", err)
	}
	if _, err := whoami(t.Context(), s, wharf, hubToken(t, s, devstack.HubServiceAccount, spoke)); !apierrors.IsUnauthorized(err) {
		t.Errorf("fresh controller token with stale persisted keys: %v, want 401", err)
	}
	checkLogged(t, s, webhookProc, "older than maxKeyAge 24h0m0s")

	// The controller back: fresh keys, in memory and on disk.
	if err := s.RestartProcess(t.Context(), "crucible-controller", s.ControllerReady); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return webhookReadiness(t, s, spoke).KeySource == "fetched", nil
	}); err != nil {
		t.Fatalf("webhook keys never fetched again after the controller came back: %v", err)
	}
	if got, err := whoami(t.Context(), s, wharf, hubToken(t, s, devstack.HubServiceAccount, spoke)); err != nil || got != controllerUser {
		t.Errorf("fresh controller token with the controller back: whoami = %q, %v; want %q", got, err, controllerUser)
	}
	if at := readState(t, stateFile).FetchedAt; !at.After(started) {
		t.Errorf("state file fetched at %v, want replaced by a fetch after %v", at, started)
	}
}

// webhookState is what the test reads of a webhook's persisted state.
type webhookState struct {
	FetchedAt time.Time `json:"fetchedAt"`
}

func readState(t *testing.T, path string) webhookState {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("webhook state: %v", err)
	}
	var st webhookState
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatalf("decode %s: %v", path, err)
	}
	return st
}

// ageState moves the state file's fetch time back by d, as if the keys
// had been fetched d earlier.
func ageState(t *testing.T, path string, d time.Duration) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var st map[string]any
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}
	st["fetchedAt"] = time.Now().Add(-d).UTC().Format(time.RFC3339Nano)
	if data, err = json.Marshal(st); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// webhookReadiness is the spoke's webhook's hub provider in /readyz.
func webhookReadiness(t *testing.T, s *devstack.Stack, spoke string) providerReadiness {
	t.Helper()
	resp, err := http.Get(s.Federation.WebhookMetricsURLs[spoke] + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Providers []providerReadiness `json:"providers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || len(body.Providers) != 1 {
		t.Fatalf("readyz %s: %+v, %v", resp.Status, body, err)
	}
	return body.Providers[0]
}

type providerReadiness struct {
	Name          string `json:"name"`
	Ready         bool   `json:"ready"`
	KeySource     string `json:"keySource"`
	KeyAgeSeconds *int64 `json:"keyAgeSeconds"`
	Error         string `json:"error"`
}

// webhookServing is ready once the webhook answers /healthz: a webhook
// without keys is never ready.
func webhookServing(s *devstack.Stack, spoke string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.Federation.WebhookMetricsURLs[spoke]+"/healthz", nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("healthz: %s", resp.Status)
		}
		return nil
	}
}

func checkLogged(t *testing.T, s *devstack.Stack, proc, line string) {
	t.Helper()
	if log, err := os.ReadFile(s.LogFile(proc)); err != nil || !strings.Contains(string(log), line) {
		t.Errorf("%s's log lacks %q (%v)", proc, line, err)
	}
}

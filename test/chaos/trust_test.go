package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"crucible.dev/crucible/internal/devstack"
)

// The trust bootstrap across restarts (issue 40): a process that must
// verify or serve the hub's keys restarts while its own source of them is
// down, under load, and starts from what it kept.

// Lines the processes log when they start from what they kept: the
// evidence that the scenarios below did not pass on fresh keys.
const (
	persistedKeysLine = "verifying with persisted provider keys"
	restoredDocLine   = "mirror restored its kept document"
)

// With the controller (the mirror) down, wharf's webhook is killed and
// started again: the controller's tokens, rotated meanwhile, can be
// verified with the keys the webhook persisted only. The controller back,
// the pods dispatched to wharf run.
func TestChaos15WebhookRestartedControllerDown(t *testing.T) {
	var restarts []int // wharf pods accepted at each controller restart
	scenario{
		num: 15, name: "spoke webhook restarted while every controller replica is down",
		injected: "SIGKILL of crucible-controller (the stack's one replica: the mirror unreachable); its tokens rotated (new files, old revoked); " +
			"SIGKILL of crucible-webhook-wharf, started again with the same arguments while the controller is down; then the controller started again; submits paced across",
		expected: "the restarted webhook is ready on its persisted keys (/readyz keySource persisted, crucible_webhook_key_age_seconds{source=\"persisted\"}, its log says so) and accepts the controller's new wharf token while the controller is still down; " +
			"pods dispatched to wharf after the controller's restart run; every accepted pod completes once with its log and artifact; nothing lost, no orphan; only submits in flight at the kill go unanswered",
		spread: time.Duration(faultsFor(20, 40)) * time.Second,
		check: func(ctx context.Context, t *testing.T, s *devstack.Stack, w *wave, o *outcome) {
			total := ackedOn(w, "wharf")
			o.Notes = append(o.Notes, fmt.Sprintf("pods to wharf accepted: %d in all, %v when the controller was started again", total, restarts))
			for i, n := range restarts {
				if total <= n {
					o.Problems = append(o.Problems, fmt.Sprintf("no pod to wharf was accepted after controller restart %d: the wave did not span the fault", i+1))
				}
			}
		},
		inject: func(ctx context.Context, t *testing.T, s *devstack.Stack, r *rand.Rand, w *wave) (int, error) {
			n := faultsFor(1, 2)
			for i := range n {
				between(ctx, r, 3*time.Second, time.Duration(faultsFor(6, 15))*time.Second)
				if err := webhookRestartWithoutController(context.WithoutCancel(ctx), s, w); err != nil {
					return i, err
				}
				restarts = append(restarts, ackedOn(w, "wharf"))
			}
			return n, nil
		},
	}.run(t)
}

// webhookRestartWithoutController is one fault of scenario 15.
func webhookRestartWithoutController(ctx context.Context, s *devstack.Stack, w *wave) error {
	const hook = "crucible-webhook-wharf"
	wharf := s.Spoke("wharf")
	seen := logCount(s, hook, persistedKeysLine)
	if err := s.KillProcess("crucible-controller"); err != nil {
		return err
	}
	down := time.Now()
	// Tokens wharf's kube-apiserver never saw: its 10 s cache of the
	// webhook's answers cannot decide them.
	if err := s.RotateControllerTokens(ctx); err != nil {
		return err
	}
	if err := s.KillProcess(hook); err != nil {
		return err
	}
	if err := s.RestartProcess(ctx, hook, s.WebhookReady("wharf")); err != nil {
		return fmt.Errorf("restart %s with the controller down: %w", hook, err)
	}
	token, err := os.ReadFile(s.Federation.SpokeTokenFiles["wharf"])
	if err != nil {
		return err
	}
	if err := whoamiAccepted(ctx, wharf, string(token)); err != nil {
		w.problem("with the controller down, the restarted webhook refused the controller's new wharf token: %v", err)
	}
	if src, err := keySource(ctx, s, "wharf"); err != nil || src != "persisted" {
		w.problem("with the controller down, the restarted webhook's keys: source %q (%v), want persisted", src, err)
	}
	m, err := scrape(ctx, s.Federation.WebhookMetricsURLs["wharf"])
	if err != nil {
		return err
	}
	if _, ok := m[`crucible_webhook_key_age_seconds{provider="hub",source="persisted"}`]; !ok {
		w.problem("with the controller down, the restarted webhook has no persisted key age series: %v", keyAgeSeries(m))
	}
	logged := retryWithin(ctx, 10*time.Second, func() (bool, error) { return logCount(s, hook, persistedKeysLine) > seen, nil })
	if logged != nil {
		w.problem("the restarted webhook never logged %q", persistedKeysLine)
	}
	if err := s.RestartProcess(ctx, "crucible-controller", s.ControllerReady); err != nil {
		return err
	}
	w.note("controller down %s; wharf's webhook restarted meanwhile on persisted keys (%s)", time.Since(down).Round(100*time.Millisecond), keyAgeSeries(m))
	return nil
}

// The hub's API server is stopped and the controller restarted: its
// mirror can serve only the documents it kept in its store. wharf's
// webhook, restarted then, fetches the hub's keys from it; the hub back,
// the mirror serves fresh documents again.
func TestChaos16ControllerRestartedHubDown(t *testing.T) {
	var phases [2]int
	scenario{
		num: 16, name: "controller restarted while the hub API is down",
		injected: fmt.Sprintf("the hub's kube-apiserver stopped (mirror TTL 1 s, max stale %s from its last fetch); SIGKILL of crucible-controller, started again; "+
			"then SIGKILL of crucible-webhook-wharf, started again (its fetch goes to the restarted mirror); the hub started again a few seconds later; submits paced across", mirrorMaxStale),
		expected: "the restarted controller serves the discovery documents kept in its store (restored, served stale, no upstream fetch succeeded) and wharf's restarted webhook fetches the hub's keys from it " +
			"(/readyz keySource fetched) and accepts the controller's wharf token and one signed by the hub's key, all with the hub down; " +
			"submits may be refused 503 during the outage (the caller submits again); the hub back, the mirror serves fresh documents; every accepted pod completes once with its log and artifact; nothing lost, no orphan; only submits in flight at the kill go unanswered",
		spread:    time.Duration(faultsFor(20, 40)) * time.Second,
		transient: []int{http.StatusServiceUnavailable},
		check: func(ctx context.Context, t *testing.T, s *devstack.Stack, w *wave, o *outcome) {
			all := len(ackedJobs(w))
			o.Notes = append(o.Notes, fmt.Sprintf("submits accepted: before the outage %d, hub down %d, after the hub returned %d", phases[0], phases[1]-phases[0], all-phases[1]))
			if all == phases[1] {
				o.Problems = append(o.Problems, "no submit was accepted after the hub returned: the wave did not span the fault")
			}
		},
		inject: func(ctx context.Context, t *testing.T, s *devstack.Stack, r *rand.Rand, w *wave) (int, error) {
			between(ctx, r, 3*time.Second, time.Duration(faultsFor(6, 15))*time.Second)
			return 1, controllerRestartWithoutHub(context.WithoutCancel(ctx), t, s, r, w, &phases)
		},
	}.run(t)
}

// controllerRestartWithoutHub is the fault of scenario 16.
// phases gets how many submits were accepted when the hub stopped and
// when it was started again.
func controllerRestartWithoutHub(ctx context.Context, t *testing.T, s *devstack.Stack, r *rand.Rand, w *wave, phases *[2]int) error {
	const hook = "crucible-webhook-wharf"
	mc, err := mirrorClient(s)
	if err != nil {
		return err
	}
	defer mc.CloseIdleConnections()
	// The kept documents' bound runs from their fetch: the outage begins
	// once both were fetched fresh. A scenario before this one may leave
	// the mirror's hub client on a revoked token (scenario 6), which
	// recovers through a failed fetch's backoff.
	var fetched time.Time
	err = retryWithin(ctx, 30*time.Second, func() (bool, error) {
		fetched = time.Now()
		return mirrorFresh(ctx, mc, s), nil
	})
	if err != nil {
		w.problem("with the hub up, the mirror served no fresh documents within 30s: %v", err)
	}
	nStop := len(ackedJobs(w))
	restored := logCount(s, "crucible-controller", restoredDocLine)
	if err := s.StopAPIServer(s.Hub); err != nil {
		return err
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = s.StartAPIServer(context.Background(), s.Hub)
		}
	})
	if err := s.KillProcess("crucible-controller"); err != nil {
		return err
	}
	if err := s.RestartProcess(ctx, "crucible-controller", s.ControllerReady); err != nil {
		return fmt.Errorf("restart the controller with the hub down: %w", err)
	}
	if err := s.KillProcess(hook); err != nil {
		return err
	}
	if err := s.RestartProcess(ctx, hook, s.WebhookReady("wharf")); err != nil {
		return fmt.Errorf("restart %s with the hub down and the controller restarted: %w", hook, err)
	}
	keysAt := time.Since(fetched)
	checkKeptDocumentsServed(ctx, t, s, w, restored)
	between(ctx, r, 2*time.Second, 4*time.Second)
	nBack := len(ackedJobs(w))
	restarted = true
	back := time.Now()
	if err := startAPIServer(ctx, s, s.Hub); err != nil {
		return err
	}
	err = retryWithin(ctx, time.Minute, func() (bool, error) { return mirrorFresh(ctx, mc, s), nil })
	if err != nil {
		w.problem("the mirror served no fresh documents within a minute of the hub's return: %v", err)
	}
	token, err := os.ReadFile(s.Federation.SpokeTokenFiles["wharf"])
	if err != nil {
		return err
	}
	if err := whoamiAccepted(ctx, s.Spoke("wharf"), string(token)); err != nil {
		w.problem("the hub back, wharf refused the controller's token: %v", err)
	}
	w.note("hub down %s; the restarted webhook had the mirror's kept keys %s after their last fresh fetch (bound: TTL 1s + %s)",
		back.Sub(fetched).Round(100*time.Millisecond), keysAt.Round(100*time.Millisecond), mirrorMaxStale)
	*phases = [2]int{nStop, nBack}
	return nil
}

// checkKeptDocumentsServed checks, with the hub down, that the restarted
// controller served only what it kept (it restored both documents and no
// fetch from the hub succeeded in its life) and that wharf's restarted
// webhook holds keys it fetched from it and verifies with them.
func checkKeptDocumentsServed(ctx context.Context, t *testing.T, s *devstack.Stack, w *wave, restoredBefore int) {
	if src, err := keySource(ctx, s, "wharf"); err != nil || src != "fetched" {
		w.problem("with the hub down, the webhook restarted after the controller has keys from %q (%v), want fetched from the restarted mirror", src, err)
	}
	m, err := scrape(ctx, s.Federation.ControllerMetricsURL)
	if err != nil {
		w.problem("scrape the restarted controller: %v", err)
		return
	}
	for _, doc := range []string{"discovery", "jwks"} {
		label := fmt.Sprintf(`document=%q`, doc)
		if ok := sum(m, "crucible_mirror_upstream_fetches_total", label, `result="ok"`); ok > 0 {
			w.problem("with the hub down, the restarted mirror fetched %s from the hub %v times", doc, ok)
		}
		if sum(m, "crucible_mirror_responses_total", label, `source="stale"`) == 0 {
			w.problem("with the hub down, the restarted mirror never served its kept %s", doc)
		}
	}
	if n := logCount(s, "crucible-controller", restoredDocLine) - restoredBefore; n != 2 {
		w.problem("the restarted controller logged %q %d times, want 2 (discovery, jwks)", restoredDocLine, n)
	}
	token, err := os.ReadFile(s.Federation.SpokeTokenFiles["wharf"])
	if err != nil {
		w.problem("read the controller's wharf token: %v", err)
		return
	}
	if err := whoamiAccepted(ctx, s.Spoke("wharf"), string(token)); err != nil {
		w.problem("with the hub down, wharf's restarted webhook refused the controller's token: %v", err)
	}
	if err := whoamiAccepted(ctx, s.Spoke("wharf"), hubSigned(t, s.Hub.ServiceAccountKey.Key, "wharf")); err != nil {
		w.problem("with the hub down, wharf's restarted webhook refused a new token signed by the hub's key: %v", err)
	}
	w.note("with the hub down, the restarted mirror's answers by source: %s; its fetches from the hub by result: %s",
		counts(byLabel(nil, m, "crucible_mirror_responses_total", "source")), counts(byLabel(nil, m, "crucible_mirror_upstream_fetches_total", "result")))
}

// keySource is where spoke's webhook has its hub keys from (/readyz).
func keySource(ctx context.Context, s *devstack.Stack, spoke string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.Federation.WebhookMetricsURLs[spoke]+"/readyz", nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var body struct {
		Providers []struct {
			KeySource string `json:"keySource"`
		} `json:"providers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return "", fmt.Errorf("readyz of %s's webhook: %s: %w", spoke, resp.Status, err)
	}
	if len(body.Providers) != 1 {
		return "", fmt.Errorf("readyz of %s's webhook: %d providers, want the hub alone", spoke, len(body.Providers))
	}
	return body.Providers[0].KeySource, nil
}

// keyAgeSeries are the webhook's crucible_webhook_key_age_seconds series.
func keyAgeSeries(m metrics) string {
	var out []string
	for series, v := range m {
		if strings.HasPrefix(series, "crucible_webhook_key_age_seconds{") {
			out = append(out, fmt.Sprintf("%s %.0f", series, v))
		}
	}
	return strings.Join(out, ", ")
}

// mirrorFresh: the mirror serves both documents fresh (cacheable).
func mirrorFresh(ctx context.Context, c *http.Client, s *devstack.Stack) bool {
	for _, path := range []string{"/.well-known/openid-configuration", "/openid/v1/jwks"} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.Federation.ControllerExternalURL+path, nil)
		if err != nil {
			return false
		}
		resp, err := c.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		if !(mirrorAnswer{code: resp.StatusCode, cacheControl: resp.Header.Get("Cache-Control")}).fresh() {
			return false
		}
	}
	return true
}

// logCount is how many lines of proc's log contain line.
func logCount(s *devstack.Stack, proc, line string) int {
	data, err := os.ReadFile(s.LogFile(proc))
	if err != nil {
		return 0
	}
	return strings.Count(string(data), line)
}

// ackedJobs are the wave's pods accepted so far.
func ackedJobs(w *wave) []job {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]job(nil), w.acked...)
}

// ackedOn is how many of the wave's pods to cluster were accepted so far.
func ackedOn(w *wave, cluster string) int {
	n := 0
	for _, j := range ackedJobs(w) {
		if j.Cluster == cluster {
			n++
		}
	}
	return n
}

// retryWithin is retryUntil bounded by d.
func retryWithin(ctx context.Context, d time.Duration, f func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return retryUntil(ctx, f)
}

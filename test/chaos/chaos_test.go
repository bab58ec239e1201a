package chaos

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"crucible.dev/crucible/internal/devstack"
)

// faultsFor is n in the reduced subset and more at full load.
func faultsFor(reduced, full int) int {
	if cfg.Full {
		return full
	}
	return reduced
}

// The controller is SIGKILLed at seeded random points of a wave (during
// submits, dispatch, await, log collection and sweeps) and started again:
// every accepted pod runs once and ends succeeded with its log and artifact,
// and the sweep leaves no pod behind.
func TestChaos1ControllerKilled(t *testing.T) {
	scenario{
		num: 1, name: "controller SIGKILLed at random points",
		injected: "SIGKILL of crucible-controller at seeded random moments, restarted at once (same store)",
		expected: "every accepted pod runs once, ends succeeded with its log and artifact; no orphan after a sweep; only submits in flight at a kill go unanswered",
		inject: func(ctx context.Context, t *testing.T, s *devstack.Stack, r *rand.Rand, w *wave) (int, error) {
			n := faultsFor(2, 6)
			for i := range n {
				if i == 0 {
					// The first kill lands among the submits; the others
					// spread over dispatch, await, log collection and sweeps.
					between(ctx, r, 200*time.Millisecond, 1500*time.Millisecond)
				} else {
					between(ctx, r, 500*time.Millisecond, time.Duration(faultsFor(4, 8))*time.Second)
				}
				if err := s.KillProcess("crucible-controller"); err != nil {
					return 0, err
				}
				if err := s.RestartProcess(ctx, "crucible-controller", s.ControllerReady); err != nil {
					return 0, err
				}
			}
			return n, nil
		},
	}.run(t)
}

// The wharf kube-apiserver is stopped for a few seconds while pods are being
// dispatched, and again while they run, are awaited and push: dispatch
// retries within its budget, pushes are retried on 503, nothing is reaped.
func TestChaos2SpokeAPIServerDown(t *testing.T) {
	scenario{
		num: 2, name: "spoke API server killed during dispatch and await",
		injected: "wharf's kube-apiserver stopped for 5–10 s during submits (dispatch), then again during await and pushes",
		expected: "every submit answered 201; every pod completes once with its log and artifact; nothing lost or reaped",
		strict:   true,
		spread:   15 * time.Second,
		bites:    true,
		inject: func(ctx context.Context, t *testing.T, s *devstack.Stack, r *rand.Rand, w *wave) (int, error) {
			wharf := s.Spoke("wharf")
			down := func() error {
				if err := s.StopAPIServer(wharf); err != nil {
					return err
				}
				between(ctx, r, 5*time.Second, 10*time.Second)
				return startAPIServer(context.WithoutCancel(ctx), s, wharf)
			}
			between(ctx, r, 300*time.Millisecond, 1500*time.Millisecond)
			if err := down(); err != nil {
				return 0, err
			}
			if !cfg.Full {
				return 1, nil // the outage already spans dispatch, await and pushes of the first pods
			}
			w.awaitSubmitted(ctx)
			between(ctx, r, 500*time.Millisecond, 2*time.Second)
			return 2, down()
		},
	}.run(t)
}

// The hub's signing key is rotated while pods are dispatched (the hub's API
// server restarts with a new key), and the controller's tokens are then
// re-issued with the new key id: the webhooks learn the key through the
// mirror and no 401 reaches a caller.
func TestChaos5HubKeyRotated(t *testing.T) {
	fullOnly(t)
	scenario{
		num: 5, name: "hub signing key rotated during dispatch",
		injected: "RotateServiceAccountKey on the hub (its kube-apiserver restarts with a new signing key), then the controller's tokens re-issued under the new key",
		expected: "every submit answered 201 (no 401 reaches a caller); every pod completes once",
		strict:   true,
		// The controller re-reads its token files every minute (or after a
		// 401): submits paced over 75 s are dispatched with the new key's
		// tokens too, which the webhooks can verify only via the mirror.
		spread: 75 * time.Second,
		inject: func(ctx context.Context, t *testing.T, s *devstack.Stack, r *rand.Rand, w *wave) (int, error) {
			between(ctx, r, 300*time.Millisecond, 2*time.Second)
			if err := s.RotateServiceAccountKey(context.WithoutCancel(ctx), s.Hub); err != nil {
				return 0, err
			}
			between(ctx, r, 0, time.Second)
			return 1, s.RotateControllerTokens(context.WithoutCancel(ctx))
		},
	}.run(t)
}

// The controller's token files are replaced every few seconds and the old
// tokens revoked while the wave runs.
func TestChaos6TokensRotated(t *testing.T) {
	scenario{
		num: 6, name: "controller tokens rotated and revoked every few seconds",
		injected: "RotateControllerTokens (new token files, old ones revoked) every 2–4 s until the wave is submitted, three more times after",
		expected: "every submit answered 201; every pod completes once",
		strict:   true,
		inject: func(ctx context.Context, t *testing.T, s *devstack.Stack, r *rand.Rand, w *wave) (int, error) {
			n, after := 0, 0
			for after < 3 && ctx.Err() == nil {
				between(ctx, r, 2*time.Second, 4*time.Second)
				if err := s.RotateControllerTokens(context.WithoutCancel(ctx)); err != nil {
					return n, err
				}
				n++
				select {
				case <-w.submitted:
					after++
				default:
				}
			}
			return n, nil
		},
	}.run(t)
}

// wharf's authn webhook is killed and stays down past kube-apiserver's 10 s
// cache of its answers while submits keep coming: the spoke refuses the
// controller's token meanwhile (401), the controller retries, and every pod
// still runs once.
func TestChaos7SpokeWebhookKilled(t *testing.T) {
	scenario{
		num: 7, name: "spoke webhook killed and restarted",
		injected: "SIGKILL of crucible-webhook-wharf, down 12–15 s (past the 10 s authn cache), restarted; submits paced across the outage",
		expected: "every submit answered 201; the controller retries (transient retries rise); every pod completes once with its log and artifact",
		strict:   true,
		spread:   time.Duration(faultsFor(20, 40)) * time.Second,
		bites:    true,
		inject: func(ctx context.Context, t *testing.T, s *devstack.Stack, r *rand.Rand, w *wave) (int, error) {
			n := faultsFor(1, 2)
			for range n {
				between(ctx, r, time.Second, 3*time.Second)
				if err := s.KillProcess("crucible-webhook-wharf"); err != nil {
					return 0, err
				}
				between(ctx, r, 12*time.Second, 15*time.Second)
				if err := s.RestartProcess(context.WithoutCancel(ctx), "crucible-webhook-wharf", s.WebhookReady("wharf")); err != nil {
					return 0, err
				}
			}
			return n, nil
		},
	}.run(t)
}

package chaos

import (
	"context"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/jwt/jwttest"
)

// mirrorMaxStale is the chaos stacks' MirrorMaxStale.
const mirrorMaxStale = 30 * time.Second

// The hub's API server is stopped under load for longer than the mirror's
// staleness bound and started again. Within the bound the mirror serves its
// last good documents (no-cache); past it the mirror fails closed (503,
// Retry-After, no-store) and wharf refuses a token whose key it would have
// to fetch; all along the webhooks authenticate the controller with the keys
// they hold, so every submit is dispatched; after the hub returns the mirror
// serves fresh documents again, nothing restarted.
func TestChaos4HubAPIDown(t *testing.T) {
	scenario{
		num: 4, name: "the hub API down past the mirror's staleness bound",
		injected: fmt.Sprintf("the hub's kube-apiserver stopped for 40–45 s (mirror TTL 1 s, max stale %s) while submits are paced across the outage, then started again", mirrorMaxStale),
		expected: "the mirror serves stale documents within the bound, then 503 with Retry-After (fails closed); wharf keeps authenticating the controller (and a token signed by the hub's key) and refuses one whose key it cannot fetch; " +
			"every submit answered 201 in every phase; after the hub returns the mirror serves fresh documents with no process restarted",
		strict: true,
		spread: time.Duration(faultsFor(55, 60)) * time.Second,
		inject: func(ctx context.Context, t *testing.T, s *devstack.Stack, r *rand.Rand, w *wave) (int, error) {
			between(ctx, r, time.Second, 3*time.Second)
			return 1, hubDown(ctx, t, s, r, w)
		},
	}.run(t)
}

func hubDown(ctx context.Context, t *testing.T, s *devstack.Stack, r *rand.Rand, w *wave) error {
	wharf := s.Spoke("wharf")
	pids := s.Processes()
	// The phase "hub up" ends when the hub exited: a stopping kube-apiserver
	// already fails requests while it shuts down, so the mirror may serve
	// stale documents in "hub up" too.
	ctlBefore, err := scrape(ctx, s.Federation.ControllerMetricsURL)
	if err != nil {
		return err
	}
	hookBefore, err := scrape(ctx, s.Federation.WebhookMetricsURLs["wharf"])
	if err != nil {
		return err
	}
	mp, err := probeMirror(ctx, s)
	if err != nil {
		return err
	}
	defer mp.stop()
	// Tokens checked in each phase: one signed by the hub's key (the
	// webhook holds it: accepted), one by a key the hub never had (the
	// webhook must fetch to know it: refused, whatever the mirror says).
	tokens := func(phase string) {
		if err := whoamiAccepted(ctx, wharf, hubSigned(t, s.Hub.ServiceAccountKey.Key, "wharf")); err != nil {
			w.problem("%s: a token signed by the hub's key was refused by wharf: %v", phase, err)
		}
		if err := whoamiAccepted(ctx, wharf, hubSigned(t, jwttest.RSAKeys()[0], "wharf")); err == nil || !apierrors.IsUnauthorized(err) {
			w.problem("%s: a token signed by an unknown key was not refused with 401 by wharf: %v", phase, err)
		}
	}
	acked := func() int {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.acked)
	}
	tokens("before the outage")
	// The outage begins once the mirror serves a fresh document, so that
	// its bound runs from a fetch this scenario saw. A scenario before this
	// one on the shared stack may leave the mirror's hub client holding a
	// revoked token (scenario 6): its next fetch is refused (401), client-go
	// rereads the token file, and the mirror serves its stale copy through
	// the failure's backoff before it fetches again.
	upCtx, cancelUp := context.WithTimeout(ctx, 30*time.Second)
	err = retryUntil(upCtx, func() (bool, error) { return mp.freshSince(time.Time{}), nil })
	cancelUp()
	if err != nil {
		w.problem("with the hub up, the mirror served no fresh document within 30s: %v", err)
	}
	outage := 40*time.Second + time.Duration(r.Int64N(int64(5*time.Second)))
	nStop := acked()
	if err := s.StopAPIServer(s.Hub); err != nil {
		return err
	}
	stopped := time.Now()
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = s.StartAPIServer(context.Background(), s.Hub)
		}
	})
	between(ctx, r, 3*time.Second, 5*time.Second)
	tokens("hub down, within the bound")
	var closed mirrorAnswer // the first 503
	_ = retryUntil(ctx, func() (bool, error) {
		closed = mp.firstClosed()
		return !closed.at.IsZero() || time.Since(stopped) > outage, nil
	})
	closedAt := closed.at // when it was asked for
	nClosed := acked()
	if !closedAt.IsZero() {
		tokens("hub down, past the bound")
	}
	select {
	case <-ctx.Done():
	case <-time.After(time.Until(stopped.Add(outage))):
	}
	nRestart := acked()
	restarted = true
	// The hub serves before StartAPIServer sees it ready: its phase, "hub
	// back", begins when it is started.
	back := time.Now()
	if err := startAPIServer(context.WithoutCancel(ctx), s, s.Hub); err != nil {
		return err
	}
	err = retryUntil(ctx, func() (bool, error) { return mp.freshSince(back), nil })
	if err != nil {
		w.problem("the mirror served no fresh document after the hub came back: %v", err)
	}
	tokens("after the hub returned")
	mp.stop()

	for name, pid := range s.Processes() {
		if name != "kube-apiserver-hub" && pids[name] != pid {
			w.problem("%s was restarted (pid %d → %d): recovery must need no restart", name, pids[name], pid)
		}
	}
	ph := mp.phases(stopped, back)
	w.note("mirror answers by phase: %s", counts(ph))
	// The bound runs from the mirror's last good fetch, not from the hub's
	// exit: a kube-apiserver shutting down (for up to the stack's stop
	// grace) or starved on a busy machine fails fetches before it exits. A
	// fresh answer to a request sent at f was fetched after f − TTL; the
	// 503 was decided before its answer arrived, more than TTL + max stale
	// after the fetch it had. So that answer must arrive more than max
	// stale after f, whatever the request latencies were.
	lastFresh := mp.lastFreshBefore(closedAt)
	sinceFresh := closed.done.Sub(lastFresh)
	if !closedAt.IsZero() {
		w.note("the mirror failed closed %s after the hub stopped, %s after its last fresh answer (bound: its last good fetch + TTL 1s + %s)",
			closedAt.Sub(stopped).Round(100*time.Millisecond), sinceFresh.Round(100*time.Millisecond), mirrorMaxStale)
	}
	w.note("submits accepted: before the outage %d, hub down within the bound %d, past the bound %d, after the hub returned %d",
		nStop, nClosed-nStop, nRestart-nClosed, acked()-nRestart)
	ctlAfter, err := scrape(ctx, s.Federation.ControllerMetricsURL)
	if err != nil {
		return err
	}
	hookAfter, err := scrape(ctx, s.Federation.WebhookMetricsURLs["wharf"])
	if err != nil {
		return err
	}
	w.note("controller: mirror upstream fetches %v, mirror answers by source %v; wharf's webhook: JWKS fetches %v, reviews %v",
		byLabel(ctlBefore, ctlAfter, "crucible_mirror_upstream_fetches_total", "result"),
		byLabel(ctlBefore, ctlAfter, "crucible_mirror_responses_total", "source"),
		byLabel(hookBefore, hookAfter, "crucible_webhook_jwks_fetches_total", "result"),
		byLabel(hookBefore, hookAfter, "crucible_webhook_reviews_total", "result"))
	switch {
	case ph["hub down: 200 stale (no-cache)"] == 0:
		w.problem("the mirror never served a stale document while the hub was down")
	case closedAt.IsZero():
		w.problem("the mirror never failed closed (503) during a %s outage, past its %s bound", outage.Round(time.Second), mirrorMaxStale)
	case lastFresh.IsZero():
		w.problem("the mirror served no fresh document before it failed closed")
	case sinceFresh <= mirrorMaxStale:
		w.problem("the mirror failed closed %s after its last fresh answer, within its %s bound", sinceFresh.Round(100*time.Millisecond), mirrorMaxStale)
	case mp.servedAfter(closedAt, back):
		w.problem("the mirror served a document again after failing closed, with the hub still down")
	}
	if !closedAt.IsZero() && nRestart == nClosed {
		w.problem("no submit was accepted past the mirror's bound: dispatch stalled")
	}
	return nil
}

// mirrorProbe asks the mirror for its discovery document every 250 ms and
// remembers every answer.
type mirrorProbe struct {
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once

	mu      sync.Mutex
	answers []mirrorAnswer
}

type mirrorAnswer struct {
	at, done                 time.Time // request sent, answer (or error) received
	code                     int       // 0: no answer
	cacheControl, retryAfter string
}

func probeMirror(ctx context.Context, s *devstack.Stack) (*mirrorProbe, error) {
	client, err := mirrorClient(s)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	mp := &mirrorProbe{cancel: cancel, done: make(chan struct{})}
	url := s.Federation.ControllerExternalURL + "/.well-known/openid-configuration"
	go func() {
		defer close(mp.done)
		defer client.CloseIdleConnections()
		for ctx.Err() == nil {
			a := mirrorAnswer{at: time.Now()}
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return
			}
			if resp, err := client.Do(req); err == nil {
				resp.Body.Close()
				a.code, a.cacheControl, a.retryAfter = resp.StatusCode, resp.Header.Get("Cache-Control"), resp.Header.Get("Retry-After")
			}
			a.done = time.Now()
			mp.mu.Lock()
			mp.answers = append(mp.answers, a)
			mp.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	return mp, nil
}

// mirrorClient asks the mirror as the webhooks do: trusting the stack's CA.
func mirrorClient(s *devstack.Stack) (*http.Client, error) {
	pem, err := os.ReadFile(s.CAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}, nil
}

func (mp *mirrorProbe) stop() {
	mp.once.Do(func() {
		mp.cancel()
		<-mp.done
	})
}

// firstClosed is the mirror's first answer 503 with Retry-After and
// no-store (the zero answer: none yet).
func (mp *mirrorProbe) firstClosed() mirrorAnswer {
	mp.mu.Lock()
	defer mp.mu.Unlock()
	for _, a := range mp.answers {
		if a.code == http.StatusServiceUnavailable && a.retryAfter != "" && a.cacheControl == "no-store" {
			return a
		}
	}
	return mirrorAnswer{}
}

// lastFreshBefore is when the last fresh (cacheable) document before t was
// asked for (zero: none).
func (mp *mirrorProbe) lastFreshBefore(t time.Time) time.Time {
	mp.mu.Lock()
	defer mp.mu.Unlock()
	var last time.Time
	for _, a := range mp.answers {
		if a.at.Before(t) && a.fresh() {
			last = a.at
		}
	}
	return last
}

// fresh: a document the mirror served as fresh (cacheable).
func (a mirrorAnswer) fresh() bool {
	return a.code == http.StatusOK && strings.HasPrefix(a.cacheControl, "public, max-age=")
}

// freshSince: a fresh (cacheable) document was served after t.
func (mp *mirrorProbe) freshSince(t time.Time) bool {
	mp.mu.Lock()
	defer mp.mu.Unlock()
	for _, a := range mp.answers {
		if a.at.After(t) && a.fresh() {
			return true
		}
	}
	return false
}

// servedAfter: a document (200) was served between from and to.
func (mp *mirrorProbe) servedAfter(from, to time.Time) bool {
	mp.mu.Lock()
	defer mp.mu.Unlock()
	for _, a := range mp.answers {
		if a.at.After(from) && a.at.Before(to) && a.code == http.StatusOK {
			return true
		}
	}
	return false
}

// phases counts the answers by phase (hub up, down, back) and kind.
func (mp *mirrorProbe) phases(stopped, back time.Time) map[string]int {
	mp.mu.Lock()
	defer mp.mu.Unlock()
	m := map[string]int{}
	for _, a := range mp.answers {
		phase := "hub up"
		switch {
		case a.at.After(back):
			phase = "hub back"
		case a.at.After(stopped):
			phase = "hub down"
		}
		kind := fmt.Sprint(a.code)
		switch {
		case a.code == 0:
			kind = "no answer"
		case a.code == http.StatusOK && a.cacheControl == "no-cache":
			kind = "200 stale (no-cache)"
		case a.code == http.StatusOK:
			kind = "200 fresh"
		case a.code == http.StatusServiceUnavailable:
			kind = fmt.Sprintf("503 (Retry-After %s, %s)", a.retryAfter, a.cacheControl)
		}
		m[phase+": "+kind]++
	}
	return m
}

// hubSigned is a hub token for the controller's subject with audience aud,
// signed by key with kube-apiserver's key id for it; each call a new token
// (a new jti), so kube-apiserver's cache of webhook answers never decides.
func hubSigned(t *testing.T, key *rsa.PrivateKey, aud string) string {
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(der)
	now := time.Now()
	claims := map[string]any{
		"iss": devstack.Issuer, "sub": devstack.HubSubject, "aud": []string{aud},
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(10 * time.Minute).Unix(),
		"jti": fmt.Sprintf("chaos-%d", rand.Int64()),
	}
	return jwttest.Sign(t, key, jose.RS256, base64.RawURLEncoding.EncodeToString(sum[:]), claims, nil)
}

// whoamiAccepted asks spoke who the token's bearer is (SelfSubjectReview):
// nil when authenticated.
func whoamiAccepted(ctx context.Context, spoke *devstack.Cluster, token string) error {
	cfg := rest.AnonymousClientConfig(spoke.Admin)
	cfg.BearerToken = token
	cfg.Timeout = 20 * time.Second
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	_, err = client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	return err
}

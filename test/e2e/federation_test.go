package e2e

import (
	"context"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
	"crucible.dev/crucible/internal/webhook/webhooktest"
)

// stackOptions are the package's stack: the shared one, and the own stacks
// of tests that take its hub away. A fresh value each time: a stack fills in
// its spokes' options as it starts.
func stackOptions() devstack.Options {
	return devstack.Options{
		Crucible:       devstacktest.BuildCrucible,
		Spokes:         []devstack.SpokeOptions{{Name: "wharf"}, {Name: "dock"}},
		MirrorTTL:      time.Second,
		MirrorMaxStale: 8 * time.Second,
		SweepInterval:  2 * time.Second,
		OrphanGrace:    orphanGrace,
		RetryBudget:    90 * time.Second,
	}
}

func TestMain(m *testing.M) {
	webhooktest.ServeIfChild() // the null and library webhooks of BenchmarkAuthnWebhookVsBuiltin
	os.Exit(devstacktest.Main(m, stackOptions()))
}

// whoami asks spoke who token is (SelfSubjectReview), with no other credential.
func whoami(ctx context.Context, s *devstack.Stack, spoke *devstack.Cluster, token string) (string, error) {
	cfg := rest.AnonymousClientConfig(spoke.Admin)
	cfg.BearerToken = token
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	r, err := client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return r.Status.UserInfo.Username, nil
}

func hubToken(t *testing.T, s *devstack.Stack, sa string, aud ...string) string {
	t.Helper()
	tok, err := s.Hub.TokenRequest(t.Context(), devstack.HubNamespace, sa, aud, 600, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// orphanGrace is how long the sweep leaves a pod without a row alone.
const orphanGrace = 10 * time.Second

const controllerUser = "hub:system:serviceaccount:crucible:crucible-controller"

func TestHubTokenAcceptedBySpoke(t *testing.T) {
	s := sharedStack(t)
	for _, spoke := range s.Spokes {
		got, err := whoami(t.Context(), s, spoke, hubToken(t, s, devstack.HubServiceAccount, spoke.Name))
		if err != nil || got != controllerUser {
			t.Errorf("%s: whoami = %q, %v; want %q", spoke.Name, got, err, controllerUser)
		}
	}
}

func TestForgedTokenControlIsAccepted(t *testing.T) {
	// The forging helper makes tokens the webhook accepts when nothing is
	// wrong with them, so the rejections below are about what was changed.
	s := sharedStack(t)
	tok := forged{claims: hubClaims(devstack.HubSubject, "wharf")}.signRS256(t, s.Hub.ServiceAccountKey.Key)
	if got, err := whoami(t.Context(), s, s.Spoke("wharf"), tok); err != nil || got != controllerUser {
		t.Fatalf("whoami = %q, %v; want %q", got, err, controllerUser)
	}
}

// waitWhoami polls until a fresh token from mint is seen as want. Each poll
// mints a new token, so kube-apiserver's cache of earlier answers is no help.
func waitWhoami(t *testing.T, s *devstack.Stack, spoke *devstack.Cluster, want string, mint func() string) {
	t.Helper()
	var got string
	var last error
	err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, 45*time.Second, true, func(ctx context.Context) (bool, error) {
		got, last = whoami(ctx, s, spoke, mint())
		return last == nil && got == want, nil
	})
	if err != nil {
		t.Fatalf("whoami never became %q: last %q, %v", want, got, last)
	}
}

func TestAllowedSubjectsReloadWithoutRestart(t *testing.T) {
	s := sharedStack(t)
	wharf := s.Spoke("wharf")
	ctx := t.Context()
	if _, err := s.Hub.Client.CoreV1().ServiceAccounts(devstack.HubNamespace).Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "reloaded"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mint := func() string { return hubToken(t, s, "reloaded", "wharf") }
	if _, err := whoami(ctx, s, wharf, mint()); !apierrors.IsUnauthorized(err) {
		t.Fatalf("before reload: %v, want 401", err)
	}
	cfgFile := s.Federation.WebhookConfigFiles["wharf"]
	original, err := os.ReadFile(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.WriteFile(cfgFile, original, 0o644) })
	webhookPID := s.Processes()["crucible-webhook-wharf"]

	added := s.WebhookConfig("wharf", []string{devstack.HubSubject, "system:serviceaccount:crucible:reloaded"})
	if err := os.WriteFile(cfgFile, []byte(added), 0o644); err != nil {
		t.Fatal(err)
	}
	waitWhoami(t, s, wharf, "hub:system:serviceaccount:crucible:reloaded", mint)

	// A broken file is refused; the last good config keeps serving.
	if err := os.WriteFile(cfgFile, []byte("providers:\n- name: hub\n  issuer: {url: 42}\n  surprise: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, s.Federation.WebhookMetricsURLs["wharf"]+"/metrics", "crucible_webhook_config_last_reload_success 0")
	if got, err := whoami(ctx, s, wharf, mint()); err != nil || got != "hub:system:serviceaccount:crucible:reloaded" {
		t.Errorf("after a broken config: whoami = %q, %v; want the old config serving", got, err)
	}
	if pid := s.Processes()["crucible-webhook-wharf"]; pid != webhookPID {
		t.Errorf("webhook restarted: pid %d → %d", webhookPID, pid)
	}
}

// waitMetric polls a /metrics endpoint until it has the exact line.
func waitMetric(t *testing.T, url, line string) {
	t.Helper()
	client := caClient(t)
	var body string
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		body = getBody(t, ctx, client, url)
		for _, l := range strings.Split(body, "\n") {
			if l == line {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%s never had %q", url, line)
	}
}

func caClient(t *testing.T) *http.Client {
	t.Helper()
	return caClientFor(t, sharedStack(t))
}

// caClientFor trusts the CA of stack s.
func caClientFor(t *testing.T, s *devstack.Stack) *http.Client {
	t.Helper()
	cfg := rest.AnonymousClientConfig(s.Hub.Admin)
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Transport: rt}
}

func getBody(t *testing.T, ctx context.Context, client *http.Client, url string) string {
	t.Helper()
	resp, err := get(ctx, client, url)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

func get(ctx context.Context, client *http.Client, url string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	return client.Do(req)
}

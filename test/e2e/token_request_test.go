package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
	"crucible.dev/crucible/internal/fleet"
	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/render"
)

// clusterHealth is the controller's health of cluster name from
// /api/clusters.
func clusterHealth(t *testing.T, s *devstack.Stack, name string) fleet.Health {
	t.Helper()
	code, body := apiCall(t, s, http.MethodGet, "/api/clusters", nil)
	var clusters []apiv1.Cluster
	if err := json.Unmarshal(body, &clusters); code != http.StatusOK || err != nil {
		t.Fatalf("clusters: %d %s (%v)", code, body, err)
	}
	for _, c := range clusters {
		if c.Name == name {
			return c.Health
		}
	}
	t.Fatalf("no cluster %s in %s", name, body)
	return fleet.Health{}
}

// waitHealth polls the controller's health of cluster name until ok
// accepts it.
func waitHealth(t *testing.T, s *devstack.Stack, name string, what string, ok func(fleet.Health) bool) fleet.Health {
	t.Helper()
	var h fleet.Health
	err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
		h = clusterHealth(t, s, name)
		return ok(h), nil
	})
	if err != nil {
		t.Fatalf("%s: health never %s: %+v", name, what, h)
	}
	return h
}

// A spoke whose entry says token_source = "request" works with no token
// file and no volume: the controller asks the hub's TokenRequest API for
// its own token with the spoke's audience, dispatches to the spoke and
// reports the token's expiry. Without the hub RBAC of `render hub
// --token-request` it fails closed, at once, naming the permission; granted
// again, the spoke recovers without a restart.
func TestSpokeTokenFromTokenRequest(t *testing.T) {
	t.Parallel() // a stack of its own: see doc.go
	began := time.Now()
	s := ownStack(t, devstack.Options{Crucible: devstacktest.BuildCrucible,
		Spokes: []devstack.SpokeOptions{{Name: "wharf", TokenRequest: true}}})
	wharf := s.Spoke("wharf")

	// No token for wharf anywhere in the stack: no file, no profile key.
	if f, ok := s.Federation.SpokeTokenFiles["wharf"]; ok {
		t.Errorf("the stack wrote a token file for wharf: %s", f)
	}
	files, err := filepath.Glob(filepath.Join(s.Dir, "crucible", "*.token"))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{s.Federation.ControllerTokenFile}; !slices.Equal(files, want) {
		t.Errorf("token files %v, want only the controller's hub token %v", files, want)
	}
	prof, err := profile.Load(s.Federation.ProfileFile)
	if err != nil {
		t.Fatal(err)
	}
	entry := profileCluster(t, prof, "wharf")
	if entry.TokenSource != profile.TokenSourceRequest || entry.TokenFile != "" || entry.TokenAudience != "wharf" || entry.TokenExpiration.Duration != time.Hour {
		t.Errorf("wharf's entry: source %q, file %q, audience %q, expiration %v; want request, none, wharf, 1h",
			entry.TokenSource, entry.TokenFile, entry.TokenAudience, entry.TokenExpiration)
	}

	wp := submit(t, s, apiv1.SubmitRequest{Image: "registry.example/turn:1", Command: sleeps("1s")})
	if wp.Cluster != "wharf" {
		t.Fatalf("dispatched to %q", wp.Cluster)
	}
	waitState(t, s, wp.ID, "succeeded", time.Minute)

	// Health's expiry is the requested token's: an hour (token_expiration's
	// default) from when it was asked for, not the 10 minutes of the
	// stack's projected tokens.
	h := waitHealth(t, s, "wharf", "healthy", func(h fleet.Health) bool { return h.CredentialsValid })
	if h.TokenExpiry == nil || h.TokenExpiry.Before(began.Add(time.Hour-time.Second)) || h.TokenExpiry.After(time.Now().Add(time.Hour+time.Second)) {
		t.Errorf("wharf's token expiry %v, want an hour after a moment since %v", h.TokenExpiry, began)
	}

	// The token had the spoke's audience: wharf's webhook accepts the
	// controller's identity only with audience wharf, as it does here.
	if got, err := whoami(t.Context(), s, wharf, hubTokenFor(t, s, "wharf")); err != nil || got != controllerUser {
		t.Errorf("a token for audience wharf: %q, %v; want %q", got, err, controllerUser)
	}
	if got, err := whoami(t.Context(), s, wharf, hubTokenFor(t, s, "dock")); err == nil {
		t.Errorf("a token for audience dock was accepted by wharf as %q: the audience proves nothing", got)
	}

	// Without the RBAC: the controller starts, and wharf's health and
	// dispatch name what is missing. 403 is an answer, not retried.
	rbac := s.Hub.Client.RbacV1().RoleBindings(devstack.HubNamespace)
	if err := rbac.Delete(t.Context(), render.HubTokenRequestName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.RestartProcess(t.Context(), "crucible-controller", s.ControllerReady); err != nil {
		t.Fatal(err)
	}
	h = waitHealth(t, s, "wharf", "refused", func(h fleet.Health) bool { return h.LastError != "" })
	for _, want := range []string{"cluster wharf", "serviceaccounts/token", "resourceNames [crucible-controller]", "--token-request"} {
		if !strings.Contains(h.LastError, want) {
			t.Errorf("wharf's last error %q does not say %q", h.LastError, want)
		}
	}
	if h.Reachable || h.CredentialsValid || h.TokenExpiry != nil {
		t.Errorf("wharf's health %+v, want no token, not reached, credentials not valid", h)
	}
	code, body := apiCall(t, s, http.MethodPost, "/api/pods", apiv1.SubmitRequest{Image: "registry.example/turn:1", Command: sleeps("1s")})
	if code != http.StatusBadGateway {
		t.Errorf("submit without the RBAC: %d %s, want 502", code, body)
	}
	if n := controllerMetricValue(t, s, `crucible_transient_retries_total{op="create-pod"}`); n != 0 {
		t.Errorf("create-pod retried %v times: the hub's refusal was taken for a blip", n)
	}
	if log, err := os.ReadFile(s.LogFile("crucible-controller")); err != nil || !strings.Contains(string(log), "needs create on serviceaccounts/token") {
		t.Errorf("the controller's log does not name the missing permission (%v)", err)
	}

	// Granted again: wharf recovers without a restart.
	pid := s.Processes()["crucible-controller"]
	applyHub(t, s, render.HubTokenRequestRBAC(devstack.HubNamespace, devstack.HubServiceAccount)...)
	waitHealth(t, s, "wharf", "healthy again", func(h fleet.Health) bool { return h.CredentialsValid && h.TokenExpiry != nil })
	wp = submit(t, s, apiv1.SubmitRequest{Image: "registry.example/turn:1", Command: sleeps("1s")})
	waitState(t, s, wp.ID, "succeeded", time.Minute)
	if got := s.Processes()["crucible-controller"]; got != pid {
		t.Errorf("the controller restarted (pid %d → %d)", pid, got)
	}
}

// hubTokenFor is a token of the controller's hub service account for
// audience, as the controller asks for one.
func hubTokenFor(t *testing.T, s *devstack.Stack, audience string) string {
	t.Helper()
	return hubToken(t, s, devstack.HubServiceAccount, audience)
}

// The hub chart with a spoke whose tokenSource is request: the controller's
// profile asks for it (its audience and lifetime), the Deployment mounts no
// token volume for it, and the chart grants exactly `render hub
// --token-request`'s RBAC — also ahead of such a spoke, with
// rbac.tokenRequest.
func TestHelmHubChartTokenRequest(t *testing.T) {
	const ns, sa = "crucible", "crucible-controller"
	values := filepath.Join(t.TempDir(), "values.yaml")
	err := os.WriteFile(values, []byte(`spokes:
- {name: wharf, server: "https://api.wharf.example.com:6443", caBundle: "", loopNamespace: loops, turnServiceAccount: crucible-turn, ingestAudience: crucible-ingest}
- {name: dock, server: "https://api.dock.example.com:6443", caBundle: "", loopNamespace: loops, turnServiceAccount: crucible-turn, ingestAudience: crucible-ingest,
   tokenSource: request, audience: dock.example.com, tokenExpirationSeconds: 7200}
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	_, objs := helmTemplate(t, "crucible-hub", ns, "-f", values, "--set", "serviceAccount.name="+sa)
	p, err := profile.Parse([]byte(configMapData(t, objs, "crucible-profile", "crucible.toml")))
	if err != nil {
		t.Fatalf("the controller refuses the chart's profile: %v", err)
	}
	dock := profileCluster(t, p, "dock")
	if dock.TokenSource != profile.TokenSourceRequest || dock.TokenFile != "" || dock.TokenAudience != "dock.example.com" || dock.TokenExpiration.Duration != 2*time.Hour {
		t.Errorf("dock's entry: source %q, file %q, audience %q, expiration %v; want request, none, dock.example.com, 2h",
			dock.TokenSource, dock.TokenFile, dock.TokenAudience, dock.TokenExpiration)
	}
	if wharf := profileCluster(t, p, "wharf"); wharf.TokenSource != profile.TokenSourceFile || wharf.TokenFile == "" {
		t.Errorf("wharf's entry: source %q, file %q; want its projected token file", wharf.TokenSource, wharf.TokenFile)
	}
	var pod corev1.PodTemplateSpec
	tmpl := find(t, objs, "Deployment", "crucible-controller").Object["spec"].(map[string]any)["template"].(map[string]any)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(tmpl, &pod); err != nil {
		t.Fatal(err)
	}
	var tokens []string
	for _, v := range pod.Spec.Volumes {
		if v.Projected != nil && len(v.Projected.Sources) > 0 && v.Projected.Sources[0].ServiceAccountToken != nil {
			tokens = append(tokens, v.Projected.Sources[0].ServiceAccountToken.Audience)
		}
	}
	if !slices.Equal(tokens, []string{"wharf"}) {
		t.Errorf("projected token volumes for audiences %v, want only wharf's", tokens)
	}
	withTokenRequest := append(render.HubRBAC(ns, sa), render.HubTokenRequestRBAC(ns, sa)...)
	wantChartRBAC(t, "a spoke with tokenSource request", objs, withTokenRequest...)

	_, objs = helmTemplate(t, "crucible-hub", ns, "--set", "serviceAccount.name="+sa, "--set", "rbac.tokenRequest=true")
	wantChartRBAC(t, "rbac.tokenRequest", objs, withTokenRequest...)
}

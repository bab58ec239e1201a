package fleet_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/fleet"
	"crucible.dev/crucible/internal/profile"
)

// testBoundToPod runs against the real hub of TestRequestedTokens, once the
// RBAC of `render hub --token-request` is granted: a controller whose hub
// token is a pod's projected token (here a pod made on the hub, and a
// token bound to it, as the kubelet would project) asks for spoke tokens
// bound to that pod. The hub honours the binding: the spoke token names
// the pod, and stops authenticating once the pod is deleted, while a token
// of the unbound account (the controller outside a pod) still does.
func testBoundToPod(t *testing.T, s *devstack.Stack, unbound *fleet.HubAccount, entry profile.ClusterEntry) {
	hub := s.Hub.Client
	pod, err := hub.CoreV1().Pods(devstack.HubNamespace).Create(t.Context(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "crucible-controller-0"},
		Spec: corev1.PodSpec{ServiceAccountName: devstack.HubServiceAccount,
			Containers: []corev1.Container{{Name: "controller", Image: "registry.example/crucible:1"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	own, err := s.Hub.TokenRequest(t.Context(), devstack.HubNamespace, devstack.HubServiceAccount, []string{devstack.Issuer}, 3600,
		&authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(own), 0o600); err != nil {
		t.Fatal(err)
	}
	kube, err := kubernetes.NewForConfig(&rest.Config{Host: s.Hub.Server, BearerTokenFile: file, TLSClientConfig: rest.TLSClientConfig{CAFile: s.CAFile}})
	if err != nil {
		t.Fatal(err)
	}
	acct, err := fleet.NewHubAccount(kube, file)
	if err != nil {
		t.Fatal(err)
	}
	if acct.Pod != (fleet.BoundPod{Name: pod.Name, UID: string(pod.UID)}) {
		t.Fatalf("hub account's pod %+v, want %s %s", acct.Pod, pod.Name, pod.UID)
	}

	bound := mustToken(t, fleet.NewRequestedTokens(entry, acct, time.Now)).AccessToken
	if name, uid := podClaim(t, bound); name != pod.Name || uid != string(pod.UID) {
		t.Errorf("the hub bound the spoke token to pod %q uid %q, want %s %s", name, uid, pod.Name, pod.UID)
	}
	loose := mustToken(t, fleet.NewRequestedTokens(entry, unbound, time.Now)).AccessToken
	if name, _ := podClaim(t, loose); name != "" {
		t.Errorf("the unbound account's token names pod %q", name)
	}
	if !authenticated(t, s, bound, entry.TokenAudience) || !authenticated(t, s, loose, entry.TokenAudience) {
		t.Fatal("a spoke token does not authenticate on the hub while its pod lives")
	}

	if err := hub.CoreV1().Pods(devstack.HubNamespace).Delete(t.Context(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	// The API server caches a success for 10 s.
	err = wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return !authenticated(t, s, bound, entry.TokenAudience), nil
	})
	if err != nil {
		t.Errorf("the pod-bound spoke token still authenticates 30 s after its pod was deleted: %v", err)
	}
	if !authenticated(t, s, loose, entry.TokenAudience) {
		t.Error("the unbound token stopped authenticating: the pod's deletion proved nothing")
	}
}

// podClaim is the kubernetes.io.pod claim of token, unverified.
func podClaim(t *testing.T, token string) (name, uid string) {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWS: %d parts", len(parts))
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var claims struct {
		Kube struct {
			Pod struct{ Name, UID string } `json:"pod"`
		} `json:"kubernetes.io"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil {
		t.Fatal(err)
	}
	return claims.Kube.Pod.Name, claims.Kube.Pod.UID
}

// authenticated is the hub's TokenReview of token for audience.
func authenticated(t *testing.T, s *devstack.Stack, token, audience string) bool {
	t.Helper()
	r, err := s.Hub.Client.AuthenticationV1().TokenReviews().Create(t.Context(), &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{audience}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return r.Status.Authenticated
}

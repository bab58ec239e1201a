package devstack_test

import (
	"context"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"io"
	"math/big"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
)

// The shared stack has two spokes with their default nodes: wharf with a
// CPU and a GPU node, dock with a CPU node only.
func TestMain(m *testing.M) {
	os.Exit(devstacktest.Main(m, devstack.Options{Spokes: []devstack.SpokeOptions{{Name: devstack.DefaultSpokeName}, {Name: "dock"}}}))
}

// testPod is a pod whose first container runs command on the dev runtime.
func testPod(name string, command ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: devstack.SpokeNamespace},
		Spec: corev1.PodSpec{
			RestartPolicy:      corev1.RestartPolicyNever,
			ServiceAccountName: devstack.SpokeServiceAccount,
			Containers:         []corev1.Container{{Name: "work", Image: "registry.example/work:1", Command: command}},
		},
	}
}

func waitPod(t *testing.T, c kubernetes.Interface, name string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods(devstack.SpokeNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pod = p
		return cond(p), nil
	})
	if err != nil {
		var st corev1.PodStatus
		if pod != nil {
			st = pod.Status
		}
		t.Fatalf("pod %s: %v (last status %+v)", name, err, st)
	}
	return pod
}

func finished(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

func TestOwnedConfigMapIsGarbageCollected(t *testing.T) {
	s := devstacktest.Shared(t)
	spoke := s.Spoke(devstack.DefaultSpokeName)
	ctx := t.Context()
	pod, err := spoke.Client.CoreV1().Pods(devstack.SpokeNamespace).Create(ctx, testPod("owner", "sleep", "3600"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cms := spoke.Client.CoreV1().ConfigMaps(devstack.SpokeNamespace)
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "owned", OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID,
		}}},
		Data: map[string]string{"k": "v"},
	}
	if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// An unowned ConfigMap next to it must survive.
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "unowned"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := spoke.Client.CoreV1().Pods(devstack.SpokeNamespace).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cms.Get(ctx, "owned", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	if err != nil {
		t.Fatalf("owned ConfigMap not collected: %v", err)
	}
	if _, err := cms.Get(ctx, "unowned", metav1.GetOptions{}); err != nil {
		t.Errorf("unowned ConfigMap: %v", err)
	}
}

type jwtClaims struct {
	Iss string   `json:"iss"`
	Sub string   `json:"sub"`
	Aud []string `json:"aud"`
}

func decodeClaims(t *testing.T, token string) jwtClaims {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("token has %d parts, want 3", len(parts))
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var c jwtClaims
	if err := json.Unmarshal(payload, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestHubTokenAndDiscovery(t *testing.T) {
	s := devstacktest.Shared(t)
	ctx := t.Context()
	token, err := s.Hub.TokenRequest(ctx, devstack.HubNamespace, devstack.HubServiceAccount, []string{"wharf"}, 600, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := jwtClaims{Iss: "https://kubernetes.default.svc", Sub: "system:serviceaccount:crucible:crucible-controller", Aud: []string{"wharf"}}
	if diff := cmp.Diff(want, decodeClaims(t, token)); diff != "" {
		t.Errorf("hub token claims (-want +got):\n%s", diff)
	}

	// Discovery is readable with the hub's own audience by any service
	// account (system:service-account-issuer-discovery), not anonymously.
	hubToken, err := s.Hub.TokenRequest(ctx, devstack.HubNamespace, devstack.HubServiceAccount, []string{devstack.Issuer}, 600, nil)
	if err != nil {
		t.Fatal(err)
	}
	get := func(path, bearer string) (int, []byte) {
		cfg := rest.AnonymousClientConfig(s.Hub.Admin)
		cfg.BearerToken = bearer
		rt, err := rest.TransportFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.Hub.Server+path, nil)
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, body
	}
	code, body := get("/.well-known/openid-configuration", hubToken)
	if code != http.StatusOK {
		t.Fatalf("discovery: %d %s", code, body)
	}
	var doc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Issuer != devstack.Issuer || doc.JWKSURI != s.Hub.Server+"/openid/v1/jwks" {
		t.Errorf("discovery = %+v, want issuer %s and jwks_uri %s/openid/v1/jwks", doc, devstack.Issuer, s.Hub.Server)
	}
	code, body = get("/openid/v1/jwks", hubToken)
	if code != http.StatusOK {
		t.Fatalf("jwks: %d %s", code, body)
	}
	var jwks struct {
		Keys []struct {
			Kty, N, E string
		} `json:"keys"`
	}
	if err := json.Unmarshal(body, &jwks); err != nil {
		t.Fatal(err)
	}
	pub := s.Hub.ServiceAccountKey.Key.Public().(*rsa.PublicKey)
	if len(jwks.Keys) != 1 || jwks.Keys[0].N != base64.RawURLEncoding.EncodeToString(pub.N.Bytes()) ||
		jwks.Keys[0].E != base64.RawURLEncoding.EncodeToString(big.NewInt(int64(pub.E)).Bytes()) {
		t.Errorf("jwks = %s, want exactly the hub's service-account key", body)
	}
	if code, body := get("/openid/v1/jwks", ""); code != http.StatusForbidden {
		t.Errorf("anonymous jwks: %d %s, want 403", code, body)
	}
	// A token minted for a spoke is not valid on the hub.
	if code, _ := get("/openid/v1/jwks", token); code != http.StatusUnauthorized {
		t.Errorf("jwks with a wharf-audience token: %d, want 401", code)
	}
}

func TestSpokePodBoundTokenReview(t *testing.T) {
	s := devstacktest.Shared(t)
	spoke := s.Spoke(devstack.DefaultSpokeName)
	ctx := t.Context()
	pod, err := spoke.Client.CoreV1().Pods(devstack.SpokeNamespace).Create(ctx, testPod("bound", "sleep", "3600"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	token, err := spoke.TokenRequest(ctx, devstack.SpokeNamespace, devstack.SpokeServiceAccount, []string{"crucible-ingest"}, 600,
		&authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID})
	if err != nil {
		t.Fatal(err)
	}
	review, err := spoke.Client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{"crucible-ingest"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st := review.Status
	if !st.Authenticated || st.User.Username != "system:serviceaccount:loops:crucible-turn" {
		t.Fatalf("review = %+v, want authenticated as system:serviceaccount:loops:crucible-turn", st)
	}
	if diff := cmp.Diff([]string{"crucible-ingest"}, st.Audiences); diff != "" {
		t.Errorf("audiences (-want +got):\n%s", diff)
	}
	for key, want := range map[string]string{
		"authentication.kubernetes.io/pod-name": pod.Name,
		"authentication.kubernetes.io/pod-uid":  string(pod.UID),
	} {
		if got := st.User.Extra[key]; len(got) != 1 || got[0] != want {
			t.Errorf("extra[%s] = %v, want [%s]", key, got, want)
		}
	}

	// The same token for another audience is not authenticated.
	other, err := spoke.Client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{"something-else"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if other.Status.Authenticated {
		t.Errorf("token authenticated for audience something-else: %+v", other.Status)
	}
}

// SettleSpoke returns once a restarted spoke runs pods again and leaves no
// probe pod behind; without a scheduler it names the probe pod it waited
// for. Died lists a process that ended by itself, never one the stack
// stopped or restarted.
func TestSettleSpokeAndDied(t *testing.T) {
	s := devstacktest.Shared(t)
	spoke := s.Spoke(devstack.DefaultSpokeName)
	pods := spoke.Client.CoreV1().Pods(devstack.SpokeNamespace)
	if err := s.StopAPIServer(spoke); err != nil {
		t.Fatal(err)
	}
	if err := s.StartAPIServer(t.Context(), spoke); err != nil {
		t.Fatal(err)
	}
	if err := s.SettleSpoke(t.Context(), spoke); err != nil {
		t.Fatal(err)
	}
	probesLeft := func() []string {
		list, err := pods.List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var left []string
		for _, p := range list.Items {
			if strings.HasPrefix(p.Name, "settle-") {
				left = append(left, p.Name)
			}
		}
		return left
	}
	if left := probesLeft(); len(left) != 0 {
		t.Errorf("probe pods left behind: %v", left)
	}
	if died := s.Died(); len(died) != 0 {
		t.Fatalf("processes the stack stopped and restarted listed as died: %v", died)
	}

	scheduler := "kube-scheduler-" + spoke.Name
	if err := syscall.Kill(s.Processes()[scheduler], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.RestartProcess(context.Background(), scheduler, func(context.Context) error { return nil }); err != nil {
			t.Error(err)
		}
	})
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		died := s.Died()
		return len(died) == 1 && strings.HasPrefix(died[0], scheduler+" "), nil
	})
	if err != nil {
		t.Fatalf("Died() = %q, want %s alone", s.Died(), scheduler)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	err = s.SettleSpoke(ctx, spoke)
	if err == nil || !strings.Contains(err.Error(), `probe pod settle-`) || !strings.Contains(err.Error(), `"Pending"`) {
		t.Fatalf("SettleSpoke without a scheduler: %v, want the pending probe pod named", err)
	}
	if err := s.RestartProcess(t.Context(), scheduler, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := s.SettleSpoke(t.Context(), spoke); err != nil {
		t.Fatalf("after the scheduler came back: %v", err)
	}
	if left := probesLeft(); len(left) != 0 {
		t.Errorf("probe pods left behind: %v", left)
	}
}

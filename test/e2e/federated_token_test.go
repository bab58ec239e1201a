package e2e

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"crucible.dev/crucible/internal/devstack"
)

// The hub account federated in TestFederatedTokenHasExactlyItsRBAC, and a
// spoke account of the same name.
const (
	fedNamespace = "e2e-fed"
	fedAccount   = "consumer"
	fedSubject   = "system:serviceaccount:" + fedNamespace + ":" + fedAccount
	// fedRules is the --subject rules file: list pods in e2e-fed, nothing else.
	fedRules = "namespaced:\n  " + fedNamespace + ":\n  - apiGroups: [\"\"]\n    resources: [pods]\n    verbs: [list]\n"
	// fedConfigMap is what the spoke's own consumer may read.
	fedConfigMap = "settings"
)

// access is one request and the RBAC attributes it is authorized by: a get
// (name set) or a list of a core resource.
type access struct {
	verb, resource, namespace, name string
}

func (a access) attributes() *authorizationv1.ResourceAttributes {
	return &authorizationv1.ResourceAttributes{Verb: a.verb, Resource: a.resource, Namespace: a.namespace, Name: a.name}
}

// do makes the request itself, so the outcome is the API server's whole
// answer, authentication and authorization, not a review of it.
func (a access) do(ctx context.Context, c kubernetes.Interface) error {
	req := c.CoreV1().RESTClient().Get().Namespace(a.namespace).Resource(a.resource)
	if a.name != "" {
		req = req.Name(a.name)
	}
	return req.Do(ctx).Error()
}

// Issue 25, acceptance point 3, with real tokens on a real spoke: a hub
// service account federated to wharf as an operator does it — the output of
// `crucible render spoke --subject NS/SA=RULES`, its RBAC applied and its
// webhook configuration installed — is wharf's user hub:system:serviceaccount:…
// with no group from the hub, may do exactly what the rules grant (asked
// with SelfSubjectAccessReview and by the requests themselves, both ways),
// and nothing granted to wharf's own account of the same namespace and name,
// which keeps its rights. Hub tokens of an account not federated, or for
// another spoke's audience, are not authenticated at all.
//
// The stack is the test's own: it rewrites wharf's webhook configuration.
func TestFederatedTokenHasExactlyItsRBAC(t *testing.T) {
	t.Parallel() // a stack of its own: see doc.go
	s := ownStack(t, stackOptions())
	ctx, wharf := t.Context(), s.Spoke("wharf")

	createServiceAccount(t, s.Hub, fedNamespace, fedAccount)
	createServiceAccount(t, s.Hub, fedNamespace, "stranger")
	hubToken := func(sa, audience string) string {
		t.Helper()
		tok, err := s.Hub.TokenRequest(ctx, fedNamespace, sa, []string{audience}, 600, nil)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}

	// Wharf's own consumer, with a right the hub's must not inherit.
	createServiceAccount(t, wharf, fedNamespace, fedAccount)
	if _, err := wharf.Client.CoreV1().ConfigMaps(fedNamespace).Create(ctx,
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fedConfigMap}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	applyRBAC(t, wharf,
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "e2e-fed-own", Namespace: fedNamespace},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "e2e-fed-own", Namespace: fedNamespace},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "e2e-fed-own"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: fedNamespace, Name: fedAccount}}},
	)

	// Before federation the very token that is accepted afterwards is
	// refused: the allowlist, nothing else, is what admits it.
	if _, err := whoami(ctx, s, wharf, hubToken(fedAccount, "wharf")); !apierrors.IsUnauthorized(err) {
		t.Fatalf("hub %s on wharf before federation: %v; want 401", fedSubject, err)
	}
	federate(t, s, "wharf", fedNamespace+"/"+fedAccount, fedRules)

	hub := bearerClient(t, wharf, hubToken(fedAccount, "wharf"))
	review, err := hub.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SelfSubjectReview on wharf as the federated hub %s: %v", fedSubject, err)
	}
	// No groups claim is mapped: the hub's system:serviceaccounts[:e2e-fed]
	// stay on the hub, so no spoke binding to those groups applies either.
	want := authenticationv1.UserInfo{Username: devstack.HubUsernamePrefix + fedSubject, Groups: []string{"system:authenticated"}}
	if diff := cmp.Diff(want, review.Status.UserInfo); diff != "" {
		t.Errorf("wharf's view of the federated hub %s (-want +got):\n%s", fedSubject, diff)
	}

	own, err := wharf.TokenRequest(ctx, fedNamespace, fedAccount, nil, 600, nil)
	if err != nil {
		t.Fatal(err)
	}
	spoke := bearerClient(t, wharf, own)
	review, err = spoke.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SelfSubjectReview on wharf as its own %s: %v", fedSubject, err)
	}
	if got := review.Status.UserInfo.Username; got != fedSubject {
		t.Errorf("wharf's own consumer is %q; want %q", got, fedSubject)
	}

	for _, tc := range []struct {
		who    string
		client kubernetes.Interface
		access access
		want   bool
	}{
		{"hub consumer", hub, access{verb: "list", resource: "pods", namespace: fedNamespace}, true},
		{"hub consumer", hub, access{verb: "list", resource: "secrets", namespace: fedNamespace}, false},
		{"hub consumer", hub, access{verb: "list", resource: "pods", namespace: metav1.NamespaceDefault}, false},
		{"hub consumer", hub, access{verb: "get", resource: "configmaps", namespace: fedNamespace, name: fedConfigMap}, false},
		{"spoke consumer", spoke, access{verb: "get", resource: "configmaps", namespace: fedNamespace, name: fedConfigMap}, true},
		{"spoke consumer", spoke, access{verb: "list", resource: "pods", namespace: fedNamespace}, false},
	} {
		checkAccess(t, tc.who, tc.client, tc.access, tc.want)
	}

	for what, tok := range map[string]string{
		"a hub account not federated, for wharf":         hubToken("stranger", "wharf"),
		"the federated hub account, for dock's audience": hubToken(fedAccount, "dock"),
	} {
		if _, err := whoami(ctx, s, wharf, tok); !apierrors.IsUnauthorized(err) {
			t.Errorf("token of %s on wharf: %v; want 401", what, err)
		}
	}
}

// checkAccess asks wharf both ways whether who may make the request a —
// SelfSubjectAccessReview and the request itself (200, or 403) — and
// reports where either answer is not want.
func checkAccess(t *testing.T, who string, c kubernetes.Interface, a access, want bool) {
	t.Helper()
	ssar, err := c.AuthorizationV1().SelfSubjectAccessReviews().Create(t.Context(), &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: a.attributes()}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SelfSubjectAccessReview of %s for %+v: %v", who, a, err)
	}
	if ssar.Status.Allowed != want {
		t.Errorf("%s may %+v: SelfSubjectAccessReview says %v, want %v (%s)", who, a, ssar.Status.Allowed, want, ssar.Status.Reason)
	}
	wantCode := http.StatusForbidden
	if want {
		wantCode = http.StatusOK
	}
	if err := a.do(t.Context(), c); statusCode(err) != wantCode {
		t.Errorf("%s %+v: %v (HTTP %d), want HTTP %d", who, a, err, statusCode(err), wantCode)
	}
}

// statusCode is the HTTP status of a request's outcome: 200 for no error,
// the API server's code for its refusal, 0 when there was no answer.
func statusCode(err error) int {
	if err == nil {
		return http.StatusOK
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return int(status.Status().Code)
	}
	return 0
}

// federate federates the hub account ref (NS/SA) to spoke with the rules
// file rules, as an operator does: `crucible render spoke --subject`, its
// RBAC applied to the spoke and its webhook configuration installed. The
// stack writes every webhook's configuration when it starts, with only the
// controller allowed, so the webhook is restarted on the new file: once it
// is ready it serves that configuration, with no reload to wait for.
func federate(t *testing.T, s *devstack.Stack, spoke, ref, rules string) {
	t.Helper()
	rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rulesFile, []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"render", "spoke", "--config", s.Federation.ProfileFile, "--cluster", spoke, "--subject", ref + "=" + rulesFile,
		"--hub-subject", devstack.HubSubject, "--hub-issuer", devstack.Issuer, "--username-prefix", devstack.HubUsernamePrefix}
	c := s.Spoke(spoke)
	applyRBAC(t, c, decodeTyped(t, crucibleOutput(t, append(args, "--namespace=false")...))...)
	serveWebhookConfig(t, s, spoke, crucibleOutput(t, append(args, "--authn", "webhook", "--mirror-ca-file", s.CAFile)...))
}

// serveWebhookConfig installs config as spoke's webhook configuration and
// restarts the webhook on it: the webhook reads its allowlist at start.
func serveWebhookConfig(t testing.TB, s *devstack.Stack, spoke string, config []byte) {
	t.Helper()
	if err := os.WriteFile(s.Federation.WebhookConfigFiles[spoke], config, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.RestartProcess(t.Context(), "crucible-webhook-"+spoke, s.WebhookReady(spoke)); err != nil {
		t.Fatalf("restart %s's webhook on its federated configuration: %v", spoke, err)
	}
}

// decodeTyped decodes a YAML stream of built-in objects into their Go types.
func decodeTyped(t *testing.T, stream []byte) []runtime.Object {
	t.Helper()
	var objs []runtime.Object
	for _, doc := range yamlDocs(t, stream) {
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("decode %s: %v", doc, err)
		}
		objs = append(objs, obj)
	}
	return objs
}

// createServiceAccount creates namespace (if need be) and the account
// name in it on c.
func createServiceAccount(t *testing.T, c *devstack.Cluster, namespace, name string) {
	t.Helper()
	ensureNamespace(t, c, namespace)
	if _, err := c.Client.CoreV1().ServiceAccounts(namespace).Create(t.Context(),
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create service account %s/%s on %s: %v", namespace, name, c.Name, err)
	}
}

// bearerClient is a client of c that authenticates with token alone.
func bearerClient(t *testing.T, c *devstack.Cluster, token string) kubernetes.Interface {
	t.Helper()
	cfg := rest.AnonymousClientConfig(c.Admin)
	cfg.BearerToken = token
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

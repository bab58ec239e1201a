package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/devstack"
)

// caller is one client of the controller's API: a hub token, extra headers
// (a value "" removes a default one), the local address it connects from (a
// proxy's address, say), and, for an internal listener serving TLS, the
// client's TLS config (with the proxy's client certificate, say).
type caller struct {
	token  string
	header map[string]string
	local  string
	tls    *tls.Config
}

type answer struct {
	code   int
	header http.Header
	body   []byte
}

func (c caller) call(t *testing.T, s *devstack.Stack, method, path string, body any) answer {
	t.Helper()
	var r io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(data)
	}
	base := s.Federation.ControllerInternalURL
	if c.tls != nil {
		base = strings.Replace(base, "http://", "https://", 1)
	}
	req, _ := http.NewRequestWithContext(t.Context(), method, base+path, r)
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(apiv1.ClientHeader, "e2e")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	for k, v := range c.header {
		if k == "Host" {
			req.Host = v
			continue
		}
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	client := &http.Client{Timeout: time.Minute}
	if c.local != "" || c.tls != nil {
		d := &net.Dialer{}
		if c.local != "" {
			d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(c.local)}
		}
		client.Transport = &http.Transport{DialContext: d.DialContext, TLSClientConfig: c.tls, DisableKeepAlives: true}
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, data}
}

// want fails the test unless the answer has code.
func (a answer) want(t *testing.T, what string, code int) answer {
	t.Helper()
	if a.code != code {
		t.Fatalf("%s: %d %s, want %d", what, a.code, bytes.TrimSpace(a.body), code)
	}
	return a
}

// waitCode polls until the request answers code.
func (c caller) waitCode(t *testing.T, s *devstack.Stack, what, path string, code int, within time.Duration) answer {
	t.Helper()
	var last answer
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, within, true, func(context.Context) (bool, error) {
		last = c.call(t, s, http.MethodGet, path, nil)
		return last.code == code, nil
	})
	if err != nil {
		t.Fatalf("%s: still %d %s, want %d (%v)", what, last.code, bytes.TrimSpace(last.body), code, err)
	}
	return last
}

func (c caller) waitFinished(t *testing.T, s *devstack.Stack, id string) apiv1.WorkPod {
	t.Helper()
	var wp apiv1.WorkPod
	err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		a := c.call(t, s, http.MethodGet, "/api/pods/"+id, nil).want(t, "get", 200)
		if err := json.Unmarshal(a.body, &wp); err != nil {
			return false, err
		}
		return wp.State == "succeeded" || wp.State == "failed" || wp.State == "lost", nil
	})
	if err != nil {
		t.Fatalf("work pod %s: %s (%v)", id, wp.State, err)
	}
	return wp
}

// withAPISection restarts the controller with the stack's profile plus an
// [api] section (and extra lines for [controller], inserted at its top).
func withAPISection(t *testing.T, s *devstack.Stack, base, section string) {
	t.Helper()
	if err := os.WriteFile(s.Federation.ProfileFile, []byte(base+"\n[api]\n"+section), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.RestartProcess(t.Context(), "crucible-controller", s.ControllerReady); err != nil {
		t.Fatal(err)
	}
}

// applyHub creates RBAC objects on the hub.
func applyHub(t *testing.T, s *devstack.Stack, objs ...runtime.Object) {
	t.Helper()
	applyRBAC(t, s.Hub, objs...)
}

// applyRBAC creates RBAC objects on c (one that exists already is kept).
func applyRBAC(t testing.TB, c *devstack.Cluster, objs ...runtime.Object) {
	t.Helper()
	rbac := c.Client.RbacV1()
	for _, obj := range objs {
		var err error
		switch o := obj.(type) {
		case *rbacv1.ClusterRole:
			_, err = rbac.ClusterRoles().Create(t.Context(), o, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			_, err = rbac.ClusterRoleBindings().Create(t.Context(), o, metav1.CreateOptions{})
		case *rbacv1.Role:
			_, err = rbac.Roles(o.Namespace).Create(t.Context(), o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			_, err = rbac.RoleBindings(o.Namespace).Create(t.Context(), o, metav1.CreateOptions{})
		default:
			t.Fatalf("cannot apply %T", obj)
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}

// grant binds a ClusterRole to a subject with a RoleBinding in the API's
// namespace (the default api.namespace is the controller's, "crucible").
// grant binds ClusterRole role to subject in the hub's namespace and waits
// until the hub's authorizer honours the binding. RBAC reads bindings
// through an informer, so a request right after the create may still be
// denied, and the controller keeps a denial for access_deny_ttl: a loaded CI
// run saw a group granted crucible-submitter refused twice in a row. The
// probe is a SubjectAccessReview for the role's first rule, which the
// subject must hold through this binding only.
func grant(t *testing.T, s *devstack.Stack, name, role string, subject rbacv1.Subject) {
	t.Helper()
	applyHub(t, s, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: devstack.HubNamespace},
		Subjects:   []rbacv1.Subject{subject},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
	})
	cr, err := s.Hub.Client.RbacV1().ClusterRoles().Get(t.Context(), role, metav1.GetOptions{})
	if err != nil || len(cr.Rules) == 0 || len(cr.Rules[0].Resources) == 0 {
		t.Fatalf("ClusterRole %s: %v; want one with a resource rule first", role, err)
	}
	rule := cr.Rules[0]
	resource, subresource, _ := strings.Cut(rule.Resources[0], "/")
	attrs := &authorizationv1.ResourceAttributes{Namespace: devstack.HubNamespace, Verb: rule.Verbs[0],
		Group: rule.APIGroups[0], Resource: resource, Subresource: subresource}
	if len(rule.ResourceNames) > 0 {
		attrs.Name = rule.ResourceNames[0]
	}
	spec := authorizationv1.SubjectAccessReviewSpec{ResourceAttributes: attrs}
	switch subject.Kind {
	case rbacv1.UserKind:
		spec.User = subject.Name
	case rbacv1.GroupKind:
		spec.User, spec.Groups = "grant-probe", []string{subject.Name}
	case rbacv1.ServiceAccountKind:
		spec.User = "system:serviceaccount:" + subject.Namespace + ":" + subject.Name
	default:
		t.Fatalf("grant: subject kind %q", subject.Kind)
	}
	var last *authorizationv1.SubjectAccessReview
	err = wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		r, err := s.Hub.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
		if err != nil {
			return false, nil
		}
		last = r
		return r.Status.Allowed, nil
	})
	if err != nil {
		t.Fatalf("the hub does not honour RoleBinding %s (%s for %s %s) a minute after its create: last review %+v", name, role, subject.Kind, subject.Name, last)
	}
}

func hubServiceAccount(t *testing.T, s *devstack.Stack, name string) *corev1.ServiceAccount {
	t.Helper()
	sa, err := s.Hub.Client.CoreV1().ServiceAccounts(devstack.HubNamespace).Create(t.Context(),
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return sa
}

func saSubject(name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: devstack.HubNamespace, Name: name}
}

// userKubeconfig writes a kubeconfig for the hub whose user is user's YAML.
func userKubeconfig(t *testing.T, s *devstack.Stack, user string) string {
	t.Helper()
	path := t.TempDir() + "/kubeconfig"
	data := "apiVersion: v1\nkind: Config\nclusters:\n- name: hub\n  cluster:\n    server: " + s.Hub.Server +
		"\n    insecure-skip-tls-verify: true\nusers:\n- name: me\n  user:\n" + user +
		"\ncontexts:\n- name: hub\n  context: {cluster: hub, user: me}\ncurrent-context: hub\n"
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

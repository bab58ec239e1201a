package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/render"
	"crucible.dev/crucible/internal/webhook"
)

// TestHelmSpokeWebhookState: the spoke chart's state objects, applied to a
// real spoke, let the webhook (as the chart's service account) keep the
// hub's keys in its ConfigMap and nothing else; a webhook started while
// the mirror is unreachable verifies with them, and one started with a
// tampered value does not.
func TestHelmSpokeWebhookState(t *testing.T) {
	s := sharedStack(t)
	wharf := s.Spoke("wharf")
	const ns, cmName, sa = "authn-state-e2e", "crucible-authn-webhook-state", "crucible-authn-webhook"
	_, objs := helmTemplate(t, "crucible-spoke", ns)
	ensureNamespace(t, wharf, ns)
	var manifests []string
	for _, o := range []*unstructured.Unstructured{
		find(t, objs, "ConfigMap", cmName), find(t, objs, "ServiceAccount", sa),
		find(t, objs, "Role", "crucible-authn-webhook-state"), find(t, objs, "RoleBinding", "crucible-authn-webhook-state"),
	} {
		data, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		manifests = append(manifests, string(data))
	}
	file := filepath.Join(t.TempDir(), "state.yaml")
	if err := os.WriteFile(file, []byte(strings.Join(manifests, "---\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := kubectl(t, wharf.KubeconfigFile, "apply", "-f", file); err != nil {
		t.Fatalf("kubectl apply the chart's state objects: %v\n%s", err, out)
	}
	args := find(t, objs, "Deployment", "crucible-authn-webhook").Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)["args"]
	if !strings.Contains(strings.Join(toStrings(args), " "), "--state-configmap="+ns+"/"+cmName) {
		t.Errorf("webhook args %v lack --state-configmap=%s/%s", args, ns, cmName)
	}

	// The webhook's client: the chart's service account's token, nothing more.
	token, err := wharf.TokenRequest(t.Context(), ns, sa, nil, 600, nil)
	if err != nil {
		t.Fatal(err)
	}
	asWebhook := rest.AnonymousClientConfig(wharf.Admin)
	asWebhook.BearerToken = token
	client, err := kubernetes.NewForConfig(asWebhook)
	if err != nil {
		t.Fatal(err)
	}
	checkStateRBAC(t, client, wharf, ns, cmName)

	mirror := newSwitchedProxy(t, s.Federation.ControllerExternalURL)
	cfg := forwardedWebhookConfig(t, s, mirror.url)
	store, err := webhook.StateConfigMap(client.CoreV1(), ns, cmName)
	if err != nil {
		t.Fatal(err)
	}
	controllerToken := func() string { return hubToken(t, s, devstack.HubServiceAccount, "wharf") }

	first, _ := startStateWebhook(t, cfg, store)
	wantUser(t, "with the mirror reachable", first, controllerToken(), controllerUser)
	stored, err := wharf.Client.CoreV1().ConfigMaps(ns).Get(t.Context(), cmName, metav1.GetOptions{})
	if err != nil || !strings.Contains(stored.Data["provider-hub.json"], `"provider":"hub"`) {
		t.Fatalf("state ConfigMap after a fetch = %v (%v), want the hub provider's keys", stored.Data, err)
	}

	mirror.off()
	second, logs := startStateWebhook(t, cfg, store)
	wantUser(t, "after a restart with the mirror unreachable", second, controllerToken(), controllerUser)
	if pr := second.Ready(t.Context()).Providers[0]; pr.KeySource != "persisted" {
		t.Errorf("readyz = %+v, want keys persisted", pr)
	}
	if !strings.Contains(logs.String(), "verifying with persisted provider keys") {
		t.Errorf("the use of persisted keys is not logged:\n%s", logs)
	}

	tampered := strings.Replace(stored.Data["provider-hub.json"], `"provider":"hub"`, `"provider":"evil"`, 1)
	stored.Data["provider-hub.json"] = tampered
	if _, err := wharf.Client.CoreV1().ConfigMaps(ns).Update(t.Context(), stored, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	third, logs := startStateWebhook(t, cfg, store)
	if got := review(t, third, controllerToken()); got.Authenticated || got.Error == "" {
		t.Errorf("with a tampered state and the mirror unreachable: %+v, want status.error (no keys)", got)
	}
	if !strings.Contains(logs.String(), "ignored persisted provider keys") || !strings.Contains(logs.String(), `written for provider \"evil\"`) {
		t.Errorf("the tampered state is not ignored with its reason:\n%s", logs)
	}

	mirror.on()
	if err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		got := review(t, third, controllerToken())
		return got.Authenticated && got.User.Username == controllerUser, nil
	}); err != nil {
		t.Errorf("with the mirror back, the controller's token is not accepted: %v", err)
	}
}

// checkStateRBAC: the chart's Role lets the webhook get and update its
// ConfigMap and nothing else, not even another ConfigMap beside it.
func checkStateRBAC(t *testing.T, client kubernetes.Interface, spoke *devstack.Cluster, ns, cmName string) {
	t.Helper()
	ctx := t.Context()
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other"}, Data: map[string]string{"k": "v"}}
	if _, err := spoke.Client.CoreV1().ConfigMaps(ns).Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cms := client.CoreV1().ConfigMaps(ns)
	own, err := cms.Get(ctx, cmName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the webhook cannot get its ConfigMap: %v", err)
	}
	if _, err := cms.Update(ctx, own, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("the webhook cannot update its ConfigMap: %v", err)
	}
	for what, err := range map[string]error{
		"get another ConfigMap":    func() error { _, err := cms.Get(ctx, "other", metav1.GetOptions{}); return err }(),
		"update another ConfigMap": func() error { _, err := cms.Update(ctx, other, metav1.UpdateOptions{}); return err }(),
		"list ConfigMaps":          func() error { _, err := cms.List(ctx, metav1.ListOptions{}); return err }(),
		"create a ConfigMap": func() error {
			_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "mine"}}, metav1.CreateOptions{})
			return err
		}(),
		"delete its ConfigMap": cms.Delete(ctx, cmName, metav1.DeleteOptions{}),
		"get a Secret":         func() error { _, err := client.CoreV1().Secrets(ns).Get(ctx, "any", metav1.GetOptions{}); return err }(),
		"get kube-system's ConfigMaps": func() error {
			_, err := client.CoreV1().ConfigMaps("kube-system").Get(ctx, cmName, metav1.GetOptions{})
			return err
		}(),
	} {
		if !apierrors.IsForbidden(err) {
			t.Errorf("the webhook's account may %s: %v, want 403", what, err)
		}
	}
}

// forwardedWebhookConfig is wharf's webhook configuration with the hub
// provider's discovery URL at proxy, a stand-in for the mirror that the
// test can cut off.
func forwardedWebhookConfig(t *testing.T, s *devstack.Stack, proxy string) *webhook.Config {
	t.Helper()
	ca, err := os.ReadFile(s.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	data, err := render.WebhookConfig(render.HubTrust{
		Issuer: devstack.Issuer, DiscoveryURL: proxy + "/.well-known/openid-configuration", CertificateAuthority: string(ca),
		Audience: "wharf", AllowedSubjects: []string{devstack.HubSubject}, UsernamePrefix: devstack.HubUsernamePrefix,
	})
	if err != nil {
		t.Fatal(err)
	}
	// Keys refetched within a second of a failure, as on the dev stack.
	cfg, err := webhook.ParseConfig(append([]byte("jwksMinRefreshInterval: 1s\n"), data...))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// startStateWebhook is a webhook process's server, in this process: a new
// one per call, as after a restart, logging into the returned buffer.
func startStateWebhook(t *testing.T, cfg *webhook.Config, store webhook.StateStore) (*webhook.Server, *lockedBuffer) {
	t.Helper()
	logs := &lockedBuffer{}
	srv, err := webhook.NewServer(t.Context(), cfg, webhook.Options{Logger: slog.New(slog.NewTextHandler(logs, nil)), State: store})
	if err != nil {
		t.Fatal(err)
	}
	return srv, logs
}

func review(t *testing.T, srv *webhook.Server, token string) authv1.TokenReviewStatus {
	t.Helper()
	body, err := json.Marshal(authv1.TokenReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "authentication.k8s.io/v1", Kind: "TokenReview"},
		Spec:     authv1.TokenReviewSpec{Token: token},
	})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/authenticate", bytes.NewReader(body)))
	var got authv1.TokenReview
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatalf("review: %d %s: %v", rec.Code, rec.Body, err)
	}
	return got.Status
}

func wantUser(t *testing.T, when string, srv *webhook.Server, token, user string) {
	t.Helper()
	if got := review(t, srv, token); !got.Authenticated || got.User.Username != user {
		t.Errorf("%s: review = %+v, want %s", when, got, user)
	}
}

// switchedProxy forwards TCP to a server until switched off, when it
// breaks the connections it holds and refuses new ones: the server
// unreachable, as in an outage, with its TLS untouched (the client still
// verifies the server's certificate).
type switchedProxy struct {
	url    string
	target string

	mu   sync.Mutex
	cut  bool
	open map[net.Conn]struct{}
}

func newSwitchedProxy(t *testing.T, serverURL string) *switchedProxy {
	t.Helper()
	u, err := url.Parse(serverURL)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &switchedProxy{url: "https://" + l.Addr().String(), target: u.Host, open: map[net.Conn]struct{}{}}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); p.off(); wg.Wait() })
	wg.Go(func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { p.serve(conn) })
		}
	})
	return p
}

func (p *switchedProxy) off() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.open {
		c.Close()
	}
}

func (p *switchedProxy) on() { p.mu.Lock(); p.cut = false; p.mu.Unlock() }

// hold tracks c while the proxy is on; false when it is off.
func (p *switchedProxy) hold(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return false
	}
	p.open[c] = struct{}{}
	return true
}

func (p *switchedProxy) release(c net.Conn) {
	p.mu.Lock()
	delete(p.open, c)
	p.mu.Unlock()
	c.Close()
}

func (p *switchedProxy) serve(conn net.Conn) {
	if !p.hold(conn) {
		conn.Close()
		return
	}
	defer p.release(conn)
	upstream, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	if !p.hold(upstream) {
		upstream.Close()
		return
	}
	defer p.release(upstream)
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(upstream, conn); done <- struct{}{} }()
	go func() { _, _ = io.Copy(conn, upstream); done <- struct{}{} }()
	<-done
}

// lockedBuffer is a log sink the server writes from several goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func toStrings(v any) []string {
	items, _ := v.([]any)
	out := make([]string, 0, len(items))
	for _, i := range items {
		s, _ := i.(string)
		out = append(out, s)
	}
	return out
}

// TestHelmSpokeWebhookStateValues: the state ConfigMap outlives an
// uninstall; webhook.state.enabled=false leaves the webhook without a
// token, a store and the objects; webhook.maxKeyAge reaches the provider.
func TestHelmSpokeWebhookStateValues(t *testing.T) {
	_, objs := helmTemplate(t, "crucible-spoke", "crucible-authn")
	if keep := find(t, objs, "ConfigMap", "crucible-authn-webhook-state").GetAnnotations()["helm.sh/resource-policy"]; keep != "keep" {
		t.Errorf("state ConfigMap resource-policy = %q, want keep", keep)
	}
	pod := func(objs []*unstructured.Unstructured) map[string]any {
		spec, _, _ := unstructured.NestedMap(find(t, objs, "Deployment", "crucible-authn-webhook").Object, "spec", "template", "spec")
		return spec
	}
	if spec := pod(objs); spec["automountServiceAccountToken"] != true || spec["serviceAccountName"] != "crucible-authn-webhook" {
		t.Errorf("webhook pod with state: automount %v, account %v; want true, crucible-authn-webhook", spec["automountServiceAccountToken"], spec["serviceAccountName"])
	}

	_, objs = helmTemplate(t, "crucible-spoke", "crucible-authn", "--set", "webhook.state.enabled=false", "--set", "webhook.maxKeyAge=0s")
	spec := pod(objs)
	args := toStrings(spec["containers"].([]any)[0].(map[string]any)["args"])
	if spec["automountServiceAccountToken"] != false || spec["serviceAccountName"] != nil || strings.Contains(strings.Join(args, " "), "--state-configmap") {
		t.Errorf("webhook pod without state: automount %v, account %v, args %v; want no token, no account, no store", spec["automountServiceAccountToken"], spec["serviceAccountName"], args)
	}
	for _, o := range objs {
		if o.GetName() == "crucible-authn-webhook-state" || o.GetKind() == "ServiceAccount" && o.GetName() == "crucible-authn-webhook" {
			t.Errorf("webhook.state.enabled=false still renders %s %s", o.GetKind(), o.GetName())
		}
	}
	var cfg map[string]any
	mustYAML(t, []byte(configMapData(t, objs, "crucible-authn-webhook", "webhook.yaml")), &cfg)
	if age := cfg["providers"].([]any)[0].(map[string]any)["maxKeyAge"]; age != "0s" {
		t.Errorf("provider maxKeyAge = %v, want the value's 0s", age)
	}
	if _, err := helm(t, "template", "crucible", chartDir("crucible-spoke"), "--set", "webhook.state.configMapName=Bad_Name"); err == nil || !strings.Contains(err.Error(), "configMapName") {
		t.Errorf("a bad webhook.state.configMapName: %v, want refused by the schema", err)
	}
}

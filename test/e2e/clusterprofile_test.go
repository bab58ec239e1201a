package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	clientauthv1 "k8s.io/client-go/pkg/apis/clientauthentication/v1"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	cpv1alpha1 "sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"
	"sigs.k8s.io/cluster-inventory-api/pkg/credentials"
	"sigs.k8s.io/yaml"

	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
)

var cpResource = cpv1alpha1.GroupVersion.WithResource("clusterprofiles")

// installClusterProfileCRD creates the ClusterProfile CRD on the hub (once
// per stack: other tests may have made it) and waits until it is served.
func installClusterProfileCRD(t testing.TB, hub dynamic.Interface) {
	t.Helper()
	if err := devstack.InstallClusterProfileCRD(t.Context(), hub); err != nil {
		t.Fatal(err)
	}
}

// renderClusterProfile is `crucible render clusterprofile` for one spoke of
// the stack's controller profile, decoded.
func renderClusterProfile(t testing.TB, s *devstack.Stack, spoke, namespace string) *cpv1alpha1.ClusterProfile {
	t.Helper()
	out := crucibleOutput(t, "render", "clusterprofile", "--config", s.Federation.ProfileFile, "--cluster", spoke, "--namespace", namespace)
	var cp cpv1alpha1.ClusterProfile
	if err := yaml.UnmarshalStrict(out, &cp); err != nil {
		t.Fatalf("decode the rendered ClusterProfile %s: %v", out, err)
	}
	return &cp
}

func crucibleOutput(t testing.TB, args ...string) []byte {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(t.Context(), devstacktest.CrucibleBinary(t), args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("crucible %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// createClusterProfile creates cp on the hub, then writes its status (a
// subresource, which create ignores), and returns what the hub then holds.
func createClusterProfile(t testing.TB, hub dynamic.Interface, cp *cpv1alpha1.ClusterProfile) *cpv1alpha1.ClusterProfile {
	t.Helper()
	ctx := t.Context()
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(cp)
	if err != nil {
		t.Fatal(err)
	}
	client := hub.Resource(cpResource).Namespace(cp.Namespace)
	created, err := client.Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create ClusterProfile %s: %v", cp.Name, err)
	}
	if _, found, _ := unstructured.NestedSlice(created.Object, "status", "accessProviders"); found {
		t.Errorf("create wrote status.accessProviders of %s; the CRD's status subresource should drop it", cp.Name)
	}
	created.Object["status"] = obj["status"]
	updated, err := client.UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update ClusterProfile %s status: %v", cp.Name, err)
	}
	var got cpv1alpha1.ClusterProfile
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(updated.Object, &got); err != nil {
		t.Fatal(err)
	}
	return &got
}

// kubectlApplyClusterProfile writes cp to the hub as docs/federation.md
// says to: kubectl apply, which leaves status out, then kubectl apply
// --server-side --subresource=status, and returns what the hub then holds.
func kubectlApplyClusterProfile(t *testing.T, s *devstack.Stack, hub dynamic.Interface, cp *cpv1alpha1.ClusterProfile) *cpv1alpha1.ClusterProfile {
	t.Helper()
	data, err := yaml.Marshal(cp)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), cp.Name+".yaml")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	client := hub.Resource(cpResource).Namespace(cp.Namespace)
	if out, err := kubectl(t, s.Hub.KubeconfigFile, "apply", "-f", file); err != nil {
		t.Fatalf("kubectl apply %s: %v\n%s", file, err, out)
	}
	applied, err := client.Get(t.Context(), cp.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, found, _ := unstructured.NestedSlice(applied.Object, "status", "accessProviders"); found {
		t.Errorf("kubectl apply wrote status.accessProviders of %s; the docs say it does not", cp.Name)
	}
	if out, err := kubectl(t, s.Hub.KubeconfigFile, "apply", "--server-side", "--subresource=status", "-f", file); err != nil {
		t.Fatalf("kubectl apply --server-side --subresource=status %s: %v\n%s", file, err, out)
	}
	updated, err := client.Get(t.Context(), cp.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got cpv1alpha1.ClusterProfile
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(updated.Object, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Status.AccessProviders) != 1 {
		t.Fatalf("after kubectl apply --subresource=status, %s has accessProviders %+v; want the rendered one", cp.Name, got.Status.AccessProviders)
	}
	return &got
}

// consumerProviders is the rendered provider file, with the absolute path
// of the binary under test, pins as its --server-pins file and
// CRUCIBLE_TOKEN_DIR set in its exec env (a consumer pod sets neither:
// crucible on its PATH, the chart's token layout and pins file), read by
// the credentials library as a consumer reads it.
func consumerProviders(t *testing.T, tokenDir, pins string) *credentials.CredentialsProvider {
	t.Helper()
	out := crucibleOutput(t, "render", "clusterprofile", "--provider-file", "--command", devstacktest.CrucibleBinary(t), "--server-pins-path", pins)
	return loadProviders(t, withTokenDir(t, "provider file", out, tokenDir))
}

// renderedPins is `crucible render clusterprofile --server-pins` for the
// stack's spokes, in a file of the test's.
func renderedPins(t testing.TB, s *devstack.Stack) string {
	t.Helper()
	out := crucibleOutput(t, "render", "clusterprofile", "--server-pins", "--config", s.Federation.ProfileFile)
	path := filepath.Join(t.TempDir(), "server-pins.json")
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// withTokenDir is a provider file (what names it, for errors) of one
// provider, with CRUCIBLE_TOKEN_DIR set in that provider's exec env.
func withTokenDir(t testing.TB, what string, providersJSON []byte, tokenDir string) credentials.CredentialsProvider {
	t.Helper()
	var file credentials.CredentialsProvider
	if err := json.Unmarshal(providersJSON, &file); err != nil || len(file.Providers) != 1 {
		t.Fatalf("%s %s: %v; want one provider", what, providersJSON, err)
	}
	file.Providers[0].ExecConfig.Env = []clientcmdapi.ExecEnvVar{{Name: "CRUCIBLE_TOKEN_DIR", Value: tokenDir}}
	return file
}

// loadProviders writes file and reads it back as a consumer reads its
// --clusterprofile-provider-file: through the credentials library.
func loadProviders(t testing.TB, file credentials.CredentialsProvider) *credentials.CredentialsProvider {
	t.Helper()
	data, err := json.Marshal(file)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "clusterprofile-provider-file.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	providers, err := credentials.NewFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return providers
}

// hubNamespace makes a namespace of the test's own on the hub.
func hubNamespace(t *testing.T, s *devstack.Stack, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := s.Hub.Client.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.Hub.Client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// A KEP-4322 consumer — the cluster-inventory-api credentials library, the
// version Kueue v0.17.0 requires — builds a client for wharf from the
// ClusterProfile crucible renders, on the hub, and the provider file
// crucible renders, and reaches wharf as the hub controller's federated
// identity: the token is the projected one at $CRUCIBLE_TOKEN_DIR/wharf/token
// (the chart's layout), handed over by `crucible credential`.
func TestClusterProfileConsumerLibrary(t *testing.T) {
	s := sharedStack(t)
	ctx := t.Context()
	hub, err := dynamic.NewForConfig(s.Hub.Admin)
	if err != nil {
		t.Fatal(err)
	}
	installClusterProfileCRD(t, hub)
	hubNamespace(t, s, "clusterprofile-consumer")

	tokenDir := t.TempDir()
	if err := os.Mkdir(filepath.Join(tokenDir, "wharf"), 0o700); err != nil {
		t.Fatal(err)
	}
	// A symlink, as the kubelet's projected volume is: the token rotates under it.
	if err := os.Symlink(s.Federation.SpokeTokenFiles["wharf"], filepath.Join(tokenDir, "wharf", "token")); err != nil {
		t.Fatal(err)
	}
	cp := createClusterProfile(t, hub, renderClusterProfile(t, s, "wharf", "clusterprofile-consumer"))
	cfg, err := consumerProviders(t, tokenDir, renderedPins(t, s)).BuildConfigFromCP(cp)
	if err != nil {
		t.Fatalf("BuildConfigFromCP: %v", err)
	}
	if cfg.Host != s.Spoke("wharf").Server {
		t.Errorf("consumer's host = %q; want wharf's %q", cfg.Host, s.Spoke("wharf").Server)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Pods(devstack.SpokeNamespace).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("list pods in %s on wharf through the ClusterProfile: %v", devstack.SpokeNamespace, err)
	}
	review, err := client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SelfSubjectReview on wharf: %v", err)
	}
	if got := review.Status.UserInfo.Username; got != controllerUser {
		t.Errorf("wharf sees the consumer as %q; want %q", got, controllerUser)
	}
}

// A ClusterProfile naming dock, where the consumer's token directory holds
// wharf's token under dock's name (a mislabelled mount), gets nothing from
// `crucible credential`: the consumer's request fails before it reaches
// dock, and the plugin says why.
func TestClusterProfileWrongAudienceRefused(t *testing.T) {
	s := sharedStack(t)
	hub, err := dynamic.NewForConfig(s.Hub.Admin)
	if err != nil {
		t.Fatal(err)
	}
	installClusterProfileCRD(t, hub)
	hubNamespace(t, s, "clusterprofile-refused")

	tokenDir := t.TempDir()
	wharfToken, err := os.ReadFile(s.Federation.SpokeTokenFiles["wharf"])
	if err != nil {
		t.Fatal(err)
	}
	dockFile := filepath.Join(tokenDir, "dock", "token")
	if err := os.Mkdir(filepath.Dir(dockFile), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dockFile, wharfToken, 0o600); err != nil {
		t.Fatal(err)
	}
	cp := kubectlApplyClusterProfile(t, s, hub, renderClusterProfile(t, s, "dock", "clusterprofile-refused"))
	cfg, err := consumerProviders(t, tokenDir, renderedPins(t, s)).BuildConfigFromCP(cp)
	if err != nil {
		t.Fatalf("BuildConfigFromCP: %v", err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = client.CoreV1().Pods(devstack.SpokeNamespace).List(t.Context(), metav1.ListOptions{})
	if err == nil || !strings.Contains(err.Error(), "exec: executable") {
		t.Fatalf("list pods on dock with wharf's token = %v; want the exec plugin's failure", err)
	}
	if apierrors.ReasonForError(err) != metav1.StatusReasonUnknown {
		t.Errorf("dock answered (%v); the request should not have left the consumer", err)
	}
	// client-go sends the plugin's stderr to the process's; run the same
	// exec config with the exec info client-go builds, to read the reason.
	stderr := runExecPlugin(t, cfg)
	if !strings.Contains(stderr, "token for another audience") || !strings.Contains(stderr, `"dock"`) || !strings.Contains(stderr, dockFile) {
		t.Errorf("plugin stderr = %q; want the audience refusal naming dock and %s", stderr, dockFile)
	}
}

// runExecPlugin runs cfg's exec provider as client-go does (its env, and
// KUBERNETES_EXEC_INFO with spec.cluster from cfg and the extension as
// config), expects it to fail, and returns its stderr.
func runExecPlugin(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	p := cfg.ExecProvider
	raw, ok := p.Config.(*runtime.Unknown)
	if !ok {
		t.Fatalf("exec config = %T; want the extension's JSON", p.Config)
	}
	info, err := json.Marshal(clientauthv1.ExecCredential{
		TypeMeta: metav1.TypeMeta{APIVersion: p.APIVersion, Kind: "ExecCredential"},
		Spec: clientauthv1.ExecCredentialSpec{Cluster: &clientauthv1.Cluster{
			Server: cfg.Host, CertificateAuthorityData: cfg.CAData, Config: runtime.RawExtension{Raw: raw.Raw},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), p.Command, p.Args...)
	cmd.Env = append(os.Environ(), "KUBERNETES_EXEC_INFO="+string(info))
	for _, e := range p.Env {
		cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if out, err := cmd.Output(); err == nil {
		t.Fatalf("the plugin handed out a credential for %s: %s", cfg.Host, out)
	}
	return stderr.String()
}

// headerRecorder is an https listener of the test's own, standing in for a
// server a ClusterProfile writer controls: it records every Authorization
// header it is sent (as a thief would) and answers like an API server.
type headerRecorder struct {
	srv   *httptest.Server
	mu    sync.Mutex
	auths []string
}

func newHeaderRecorder(t *testing.T) *headerRecorder {
	t.Helper()
	h := &headerRecorder{}
	h.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		if a := r.Header.Get("Authorization"); a != "" {
			h.auths = append(h.auths, a)
		}
		h.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"major":"1","minor":"37","gitVersion":"v1.37.2"}`))
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *headerRecorder) caPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: h.srv.Certificate().Raw})
}

func (h *headerRecorder) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.auths = nil
}

// received is how many requests carried a credential.
func (h *headerRecorder) received() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.auths)
}

// writePins writes a --server-pins file of the test's: wharf pinned to
// server and ca.
func writePins(t *testing.T, server string, ca []byte) string {
	t.Helper()
	data, err := json.Marshal(map[string]any{"clusters": []map[string]any{{"name": "wharf", "server": server, "certificate-authority-data": ca}}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "server-pins.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Issue 37: a ClusterProfile writer chooses which spoke, never where its
// token goes. The credentials library (the version Kueue v0.17.0 pins)
// reads ClusterProfiles whose status was written by someone else than the
// consumer — pointing wharf at a listener of the test's, or naming a token
// file outside the token directory (directly or through a symlink), or the
// consumer's hub audience — and gets an error from the plugin, whose stderr
// names the check; the listener never sees an Authorization header. The
// honest ClusterProfile still reaches wharf (TestClusterProfileConsumerLibrary).
func TestClusterProfileHostileStatusRefused(t *testing.T) {
	s := sharedStack(t)
	hub, err := dynamic.NewForConfig(s.Hub.Admin)
	if err != nil {
		t.Fatal(err)
	}
	installClusterProfileCRD(t, hub)
	hubNamespace(t, s, "clusterprofile-hostile")
	thief := newHeaderRecorder(t)

	// The consumer's token directory: wharf's projected token, and the
	// consumer's own hub token where a careless layout might keep it.
	tokenDir := t.TempDir()
	wharfToken := s.Federation.SpokeTokenFiles["wharf"]
	if err := os.Mkdir(filepath.Join(tokenDir, "wharf"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(wharfToken, filepath.Join(tokenDir, "wharf", "token")); err != nil {
		t.Fatal(err)
	}
	hubToken, err := s.Hub.TokenRequest(t.Context(), devstack.HubNamespace, devstack.HubServiceAccount, []string{devstack.Issuer}, 600, nil)
	if err != nil {
		t.Fatal(err)
	}
	hubTokenFile := filepath.Join(tokenDir, "hub-token")
	if err := os.WriteFile(hubTokenFile, []byte(hubToken), 0o600); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "escape")
	if err := os.Symlink(filepath.Dir(wharfToken), outside); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(tokenDir, "escape")); err != nil {
		t.Fatal(err)
	}

	realPins := renderedPins(t, s)
	// Pinned to the listener, so that no server check is what refuses.
	thiefPins := writePins(t, thief.srv.URL, thief.caPEM())
	for _, tc := range []struct {
		name      string
		pins      string
		extension map[string]string
		wantCheck string
	}{
		{"server elsewhere", realPins, map[string]string{"cluster": "wharf"}, `server pin check failed: cluster wharf: spec.cluster.server "` + thief.srv.URL + `" is not the pinned server`},
		{"tokenFile outside the token dir", thiefPins, map[string]string{"cluster": "wharf", "tokenFile": wharfToken}, "token dir check failed: spec.cluster.config.tokenFile " + wharfToken},
		{"tokenFile through a symlink out", thiefPins, map[string]string{"cluster": "wharf", "tokenFile": filepath.Join(tokenDir, "escape", filepath.Base(wharfToken))}, "token dir check failed"},
		{"hub audience", thiefPins, map[string]string{"cluster": "wharf", "tokenFile": hubTokenFile, "audience": devstack.Issuer},
			`audience pin check failed: cluster wharf: spec.cluster.config.audience "` + devstack.Issuer + `" is not the pinned audience "wharf"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rendered := renderClusterProfile(t, s, "wharf", "clusterprofile-hostile")
			rendered.Name = strings.ToLower(strings.ReplaceAll(tc.name, " ", "-"))
			thief.reset()
			ext, err := json.Marshal(tc.extension)
			if err != nil {
				t.Fatal(err)
			}
			c := &rendered.Status.AccessProviders[0].Cluster
			c.Server, c.CertificateAuthorityData = thief.srv.URL, thief.caPEM()
			c.Extensions[0].Extension = runtime.RawExtension{Raw: ext}
			cp := createClusterProfile(t, hub, rendered)
			cfg, err := consumerProviders(t, tokenDir, tc.pins).BuildConfigFromCP(cp)
			if err != nil {
				t.Fatalf("BuildConfigFromCP: %v", err)
			}
			client, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			_, err = client.Discovery().ServerVersion()
			if err == nil || !strings.Contains(err.Error(), "exec: executable") {
				t.Errorf("server version through the hostile ClusterProfile = %v; want the exec plugin's failure", err)
			}
			if n := thief.received(); n != 0 {
				t.Fatalf("the listener received %d Authorization headers", n)
			}
			if stderr := runExecPlugin(t, cfg); !strings.Contains(stderr, tc.wantCheck) {
				t.Errorf("plugin stderr = %q; want it to name the check: %q", stderr, tc.wantCheck)
			}
		})
	}
}

//go:build interop

package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
	"crucible.dev/crucible/internal/render"
)

// The hub's Kueue, and the spoke's own Kueue of the same name.
const (
	kueueNamespace = "kueue-system"
	kueueAccount   = "kueue-controller-manager"
	kueueSubject   = "system:serviceaccount:" + kueueNamespace + ":" + kueueAccount
	// mkNamespace holds the LocalQueue and the jobs, on all three clusters
	// (MultiKueue makes the worker's copy in the job's own namespace).
	mkNamespace = "mk"
	// kueueMetricsCerts is where Kueue reads its metrics serving certificate
	// when its internal certificate management is off: a fixed path
	// (cmd/kueue/main.go), the same for the three managers here.
	kueueMetricsCerts = "/etc/kueue/metrics/certs"
)

// Issue 25, point 4: Kueue v0.17.0's MultiKueue, code nobody here wrote,
// dispatches batch Jobs from the dev hub to the dev spokes through
// crucible's federation — a ClusterProfile per spoke rendered by crucible,
// `crucible credential` as its access provider, the hub's projected tokens
// in files — with no Secret holding a credential for another cluster on any
// of the three, and keeps working after the tokens are rotated under it,
// without a restart. On the spokes the hub's Kueue is
// hub:system:serviceaccount:kueue-system:kueue-controller-manager with
// exactly MultiKueue's RBAC; the spoke's own Kueue account keeps its own.
//
// Kueue runs as a process per cluster (manager on the hub, a worker on each
// spoke), its CRDs installed from the module and its admission webhooks
// wired to loopback with a certificate from the stack's CA, so its job
// defaulting (suspend, managedBy) is Kueue's own. Its internal certificate
// management is off (it would keep its webhook certificate in a Secret and
// sign it for a Service name the API servers cannot reach here).
func TestMultiKueueThroughFederation(t *testing.T) {
	f := startMultiKueue(t, nil, kueueQuota{cpu: "8", memory: "16Gi"})
	s, workers, all, tokenDir, runs, tokens := f.s, f.workers, f.all, f.tokenDir, f.runs, f.tokens
	job1 := runJob(t, s, workers, "mk-before-rotation")

	// Rotation, as the kubelet does it: new tokens replace the files; the
	// running Kueue (same process) takes them on the plugin's next run and
	// dispatches the next job with them.
	pid := s.Processes()["kueue-hub"]
	rotated := projectTokens(t, s, tokenDir, workers)
	for _, w := range workers {
		if rotated[w.Name] == tokens[w.Name] {
			t.Fatalf("the rotated token of %s is the old one", w.Name)
		}
	}
	waitCredentialRun(t, runs, rotated)
	job2 := runJob(t, s, workers, "mk-after-rotation")
	if got := s.Processes()["kueue-hub"]; got != pid {
		t.Errorf("the hub's Kueue is process %d after the rotation, %d before: it was restarted", got, pid)
	}
	t.Logf("MultiKueue ran %s on %s and, after the rotation, %s on %s", job1.name, job1.worker, job2.name, job2.worker)

	// Every Kueue still runs (a manager that exits after its start would
	// have left the jobs above to the others).
	for _, d := range s.Died() {
		t.Errorf("died: %s", d)
	}
	// No Secret anywhere holds a credential for reaching another cluster.
	for _, c := range all {
		noCredentialSecrets(t, c)
	}
	// On the spokes: the hub's Kueue has exactly MultiKueue's verbs as the
	// prefixed user, and the spoke's own account keeps its own (and lacks the
	// hub's).
	for _, w := range workers {
		wantAccess(t, w, "hub:"+kueueSubject, []string{"system:authenticated"}, map[authorizationv1.ResourceAttributes]bool{
			{Group: "batch", Resource: "jobs", Verb: "create", Namespace: mkNamespace}:                                     true,
			{Group: "kueue.x-k8s.io", Resource: "workloads", Subresource: "status", Verb: "patch", Namespace: mkNamespace}: true,
			{Group: "batch", Resource: "jobs", Verb: "watch"}:                                                              true,
			{Resource: "pods", Verb: "create", Namespace: devstack.SpokeNamespace}:                                         false,
			{Resource: "pods", Verb: "list"}:                                                                               false,
			{Resource: "secrets", Verb: "get", Namespace: kueueNamespace}:                                                  false,
			{Group: "batch", Resource: "jobs", Verb: "update", Namespace: mkNamespace}:                                     false,
			{Resource: "configmaps", Verb: "get", Namespace: kueueNamespace}:                                               false,
		})
		wantAccess(t, w, kueueSubject, []string{"system:serviceaccounts", "system:authenticated"}, map[authorizationv1.ResourceAttributes]bool{
			{Resource: "configmaps", Verb: "get", Namespace: kueueNamespace}:           true,
			{Group: "batch", Resource: "jobs", Verb: "create", Namespace: mkNamespace}: false,
		})
	}
}

// mkFleet is the dev stack with Kueue on it: the hub's manager dispatching
// through MultiKueue to the workers, wharf and dock.
type mkFleet struct {
	s        *devstack.Stack
	workers  []*devstack.Cluster
	all      []*devstack.Cluster // the hub, then the workers
	tokenDir string              // the hub Kueue's projected tokens, <spoke>/token
	runs     string              // the credential wrapper's notes, one per run
	tokens   map[string]string   // the hashes of the tokens in tokenDir
}

// kueueQuota is a ClusterQueue's cpu and memory, on the hub and each
// worker, and its nvidia.com/gpu ("": not covered).
type kueueQuota struct{ cpu, memory, gpus string }

// startMultiKueue starts a stack of its own with Kueue on all three
// clusters and MultiKueue reaching the spokes through crucible's federation:
// clientConnection (nil: Kueue's default) is the managers' client rate, quota
// each ClusterQueue's.
func startMultiKueue(tb testing.TB, clientConnection map[string]any, quota kueueQuota) *mkFleet {
	tb.Helper()
	return startMultiKueueOn(tb, []devstack.SpokeOptions{{Name: "wharf"}, {Name: "dock"}}, clientConnection, quota, func(string) kueueQuota { return quota })
}

// startMultiKueueOn is startMultiKueue with spokes as the workers, quota the
// hub's ClusterQueue's and workerQuota each worker's.
func startMultiKueueOn(tb testing.TB, spokes []devstack.SpokeOptions, clientConnection map[string]any, quota kueueQuota, workerQuota func(worker string) kueueQuota) *mkFleet {
	tb.Helper()
	tools := devstack.FindTools()
	if _, err := os.Stat(tools.Kueue()); err != nil {
		tb.Fatalf("Kueue %s: %v: run \"make tools\" to build it", devstack.KueueVersion, err)
	}
	s := devstacktest.Start(tb, devstack.Options{Crucible: devstacktest.BuildCrucible, Spokes: spokes})
	ctx := tb.Context()
	var workers []*devstack.Cluster
	for _, so := range spokes {
		workers = append(workers, s.Spoke(so.Name))
	}
	all := append([]*devstack.Cluster{s.Hub}, workers...)
	kueueDir := kueueModuleDir(tb)
	metricsCerts(tb, s)

	// The spoke side: the hub's Kueue federated to each spoke with the
	// multikueue preset in the jobs' namespace, as `render spoke --subject
	// kueue-system/kueue-controller-manager=multikueue:mk` makes it (Kueue's
	// role in mk, cluster-wide only the list and watch its watchers need,
	// nothing in the loop namespace), next to a Kueue account of the
	// spoke's own with a right of its own.
	grants, err := render.PresetGrants(render.PresetMultiKueue, []string{mkNamespace}, render.PresetScope{LoopNamespace: devstack.SpokeNamespace})
	if err != nil {
		tb.Fatal(err)
	}
	fed := render.Federation{ControllerSubject: devstack.HubSubject, ControllerUsername: controllerUser, UsernamePrefix: devstack.HubUsernamePrefix,
		Subjects: []render.FederatedSubject{{Namespace: kueueNamespace, ServiceAccount: kueueAccount, Grants: grants}}}
	if errs := fed.Check(); len(errs) > 0 {
		tb.Fatal(errs)
	}
	for _, c := range all {
		ensureNamespace(tb, c, kueueNamespace)
		ensureNamespace(tb, c, mkNamespace)
	}
	if _, err := s.Hub.Client.CoreV1().ServiceAccounts(kueueNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: kueueAccount}}, metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
	for _, w := range workers {
		applyRBAC(tb, w, fed.RBAC()...)
		spokeOwnKueue(tb, w)
		federateSubjects(tb, s, w, devstack.HubSubject, kueueSubject)
	}

	// The hub side: Kueue's account (made above), its projected tokens (one per spoke,
	// that spoke's audience, the layout `crucible credential` reads), the
	// ClusterProfiles crucible renders, and the provider crucible renders,
	// run through a wrapper that notes each run (and a hash of each token
	// file then, never a token).
	tokenDir := tb.TempDir()
	tokens := projectTokens(tb, s, tokenDir, workers)
	hubDyn, err := dynamic.NewForConfig(s.Hub.Admin)
	if err != nil {
		tb.Fatal(err)
	}
	installClusterProfileCRD(tb, hubDyn)
	for _, w := range workers {
		createClusterProfile(tb, hubDyn, renderClusterProfile(tb, s, w.Name, kueueNamespace))
	}
	runs := filepath.Join(tb.TempDir(), "credential-runs.log")
	providers := kueueProviders(tb, tokenDir, credentialWrapper(tb, tokenDir, runs), renderedPins(tb, s))

	// Kueue on all three: CRDs, webhooks on loopback, the manager process.
	for _, c := range all {
		var multiKueue map[string]any
		if c == s.Hub {
			multiKueue = map[string]any{"gcInterval": "30s", "origin": "crucible-interop", "clusterProfile": map[string]any{"credentialsProviders": providers}}
		}
		startKueue(tb, s, c, kueueDir, multiKueue, clientConnection)
	}

	// The queues: on each worker a ClusterQueue of its own; on the hub one
	// whose admission check is MultiKueue over both spokes, each a
	// MultiKueueCluster naming its ClusterProfile.
	for _, w := range workers {
		kubectlApply(tb, w, queuesYAML("", workerQuota(w.Name)))
	}
	kubectlApply(tb, s.Hub, queuesYAML("multikueue", quota)+multiKueueYAML(workers))
	waitMultiKueueClustersActive(tb, s, workers)
	return &mkFleet{s: s, workers: workers, all: all, tokenDir: tokenDir, runs: runs, tokens: tokens}
}

// kueueModuleDir is the Kueue module hack/tools/kueue builds from: its CRDs
// and webhook manifests are read from there.
func kueueModuleDir(t testing.TB) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/kueue")
	cmd.Dir = filepath.Join(repoRoot, "hack", "tools", "kueue")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list the Kueue module (hack/tools/kueue): %v", err)
	}
	return strings.TrimSpace(string(out))
}

// metricsCerts gives Kueue the metrics certificate it requires at a fixed
// path, unless one is there, and removes afterwards what it made.
func metricsCerts(t testing.TB, s *devstack.Stack) {
	t.Helper()
	crt, key := filepath.Join(kueueMetricsCerts, "tls.crt"), filepath.Join(kueueMetricsCerts, "tls.key")
	if _, err := os.Stat(crt); err == nil {
		if _, err := os.Stat(key); err == nil {
			return // another run's, or the machine's own: kept
		}
	}
	made := kueueMetricsCerts // the topmost directory this makes
	for dir := filepath.Dir(made); dir != "/"; dir = filepath.Dir(dir) {
		if _, err := os.Stat(dir); err == nil {
			break
		}
		made = dir
	}
	if _, err := os.Stat(made); err == nil {
		made = "" // the directory exists: only the files are this test's
	}
	if err := os.MkdirAll(kueueMetricsCerts, 0o755); err != nil {
		t.Fatalf("Kueue reads its metrics certificate from %s only: %v (run as root, or make it writable)", kueueMetricsCerts, err)
	}
	t.Cleanup(func() {
		_ = os.Remove(crt)
		_ = os.Remove(key)
		if made != "" {
			_ = os.RemoveAll(made)
		}
	})
	kp, err := s.IssueServingCert(t.TempDir(), "kueue-metrics")
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{crt: kp.CertPEM, key: kp.KeyPEM} {
		if err := os.WriteFile(name, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// spokeOwnKueue makes the spoke's own Kueue account, the same namespace and
// name as the hub's, with a right the hub's must not get by the name.
func spokeOwnKueue(t testing.TB, c *devstack.Cluster) {
	t.Helper()
	if _, err := c.Client.CoreV1().ServiceAccounts(kueueNamespace).Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: kueueAccount}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	applyRBAC(t, c,
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "spoke-kueue-own", Namespace: kueueNamespace},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "spoke-kueue-own", Namespace: kueueNamespace},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "spoke-kueue-own"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: kueueNamespace, Name: kueueAccount}}})
}

// federateSubjects rewrites the spoke webhook's configuration to allow
// exactly subjects, restarts the webhook (its allowlist is read at start)
// and waits until a token of the last one is accepted.
func federateSubjects(t testing.TB, s *devstack.Stack, c *devstack.Cluster, subjects ...string) {
	t.Helper()
	serveWebhookConfig(t, s, c.Name, []byte(s.WebhookConfig(c.Name, subjects)))
	last := subjects[len(subjects)-1]
	parts := strings.Split(last, ":")
	probe := filepath.Join(t.TempDir(), "probe-token")
	var seen string
	err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		tok, err := s.Hub.TokenRequest(ctx, parts[2], parts[3], []string{c.Name}, 600, nil)
		if err != nil {
			return false, err
		}
		if err := os.WriteFile(probe, []byte(tok), 0o600); err != nil {
			return false, err
		}
		out, err := kubectl(t, tokenKubeconfig(t, c, probe), "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
		seen = out
		return err == nil && out == "hub:"+last, nil
	})
	if err != nil {
		t.Fatalf("%s's webhook does not accept %s after its restart: %v (kubectl auth whoami: %s)", c.Name, last, err, seen)
	}
}

// tokenKubeconfig is a kubeconfig for c whose user reads tokenFile.
func tokenKubeconfig(t testing.TB, c *devstack.Cluster, tokenFile string) string {
	t.Helper()
	ca := c.Admin.CAData
	if len(ca) == 0 {
		var err error
		if ca, err = os.ReadFile(c.Admin.CAFile); err != nil {
			t.Fatal(err)
		}
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[c.Name] = &clientcmdapi.Cluster{Server: c.Server, CertificateAuthorityData: ca}
	cfg.AuthInfos["token"] = &clientcmdapi.AuthInfo{TokenFile: tokenFile}
	cfg.Contexts["token"] = &clientcmdapi.Context{Cluster: c.Name, AuthInfo: "token"}
	cfg.CurrentContext = "token"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// projectTokens does what the kubelet does for the hub Kueue's projected
// volume: a token of its account per spoke, that spoke's audience, written
// to tokenDir/<spoke>/token by rename (the file is never half-written). It
// returns the tokens' hashes.
func projectTokens(t testing.TB, s *devstack.Stack, tokenDir string, workers []*devstack.Cluster) map[string]string {
	t.Helper()
	hashes := map[string]string{}
	for _, w := range workers {
		tok, err := s.Hub.TokenRequest(t.Context(), kueueNamespace, kueueAccount, []string{w.Name}, 3600, nil)
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(tokenDir, w.Name)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(dir, ".token.tmp")
		if err := os.WriteFile(tmp, []byte(tok), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "token")); err != nil {
			t.Fatal(err)
		}
		hashes[w.Name] = sha256Hex([]byte(tok))
	}
	return hashes
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// credentialWrapper is a script that notes, for each run, the hash of each
// token file, then runs `crucible credential` with its arguments.
func credentialWrapper(t testing.TB, tokenDir, runs string) string {
	t.Helper()
	script := fmt.Sprintf("#!/bin/sh\n{ echo run; sha256sum %s/*/token; } >> %s\nexec %s \"$@\"\n",
		tokenDir, runs, devstacktest.CrucibleBinary(t))
	path := filepath.Join(t.TempDir(), "crucible-credential")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// kueueProviders is the provider file `crucible render clusterprofile
// --provider-file` prints, as Kueue's Configuration takes it
// (multiKueue.clusterProfile.credentialsProviders), with command as the
// plugin, pins (`render clusterprofile --server-pins`) as its --server-pins
// and CRUCIBLE_TOKEN_DIR set (a consumer pod needs none of these: crucible
// at the rendered path, the pins and tokens where the chart mounts them).
func kueueProviders(t testing.TB, tokenDir, command, pins string) []any {
	t.Helper()
	out := crucibleOutput(t, "render", "clusterprofile", "--provider-file", "--command", command, "--server-pins-path", pins)
	file := withTokenDir(t, "provider file", out, tokenDir)
	data, err := json.Marshal(file.Providers)
	if err != nil {
		t.Fatal(err)
	}
	var providers []any
	if err := json.Unmarshal(data, &providers); err != nil {
		t.Fatal(err)
	}
	return providers
}

// startKueue installs Kueue's CRDs on c, starts a Kueue manager for it (with
// multiKueue and clientConnection as its configuration's sections of those
// names, if any) and, once it
// serves, points c's API server at its webhooks.
func startKueue(t testing.TB, s *devstack.Stack, c *devstack.Cluster, kueueDir string, multiKueue, clientConnection map[string]any) {
	t.Helper()
	if out, err := kubectl(t, c.KubeconfigFile, "apply", "--server-side", "-f", filepath.Join(kueueDir, "config", "components", "crd", "bases")); err != nil {
		t.Fatalf("install Kueue's CRDs on %s: %v\n%s", c.Name, err, out)
	}
	// kubectl wait fails at once on a CRD that has no conditions yet.
	var out string
	err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		var err error
		out, err = kubectl(t, c.KubeconfigFile, "wait", "--for=condition=Established", "--timeout=30s", "crd", "workloads.kueue.x-k8s.io",
			"clusterqueues.kueue.x-k8s.io", "localqueues.kueue.x-k8s.io", "admissionchecks.kueue.x-k8s.io", "multikueueclusters.kueue.x-k8s.io",
			"multikueueconfigs.kueue.x-k8s.io", "resourceflavors.kueue.x-k8s.io")
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("Kueue's CRDs on %s not established: %v\n%s", c.Name, err, out)
	}
	dir := t.TempDir()
	if _, err := s.IssueServingCert(dir, "webhook"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"crt", "key"} { // controller-runtime's file names
		if err := os.Rename(filepath.Join(dir, "webhook."+name), filepath.Join(dir, "tls."+name)); err != nil {
			t.Fatal(err)
		}
	}
	ports := loopbackPorts(t, 3)
	cfg := map[string]any{
		"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
		"namespace":              kueueNamespace,
		"health":                 map[string]any{"healthProbeBindAddress": fmt.Sprintf("127.0.0.1:%d", ports[0])},
		"metrics":                map[string]any{"bindAddress": fmt.Sprintf("127.0.0.1:%d", ports[1])},
		"webhook":                map[string]any{"host": "127.0.0.1", "port": ports[2], "certDir": dir},
		"leaderElection":         map[string]any{"leaderElect": false},
		"internalCertManagement": map[string]any{"enable": false},
		"integrations":           map[string]any{"frameworks": []string{"batch/job"}},
	}
	if multiKueue != nil {
		cfg["multiKueue"] = multiKueue
	}
	if clientConnection != nil {
		cfg["clientConnection"] = clientConnection
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgFile, data, 0o600); err != nil {
		t.Fatal(err)
	}
	// The ClusterProfile path is the manager's only: with the gate on, a
	// worker waits for a ClusterProfile CRD it has no need of, and exits.
	gates := "VisibilityOnDemand=false"
	if multiKueue != nil {
		gates += ",MultiKueueClusterProfile=true"
	}
	name := "kueue-" + c.Name
	if _, err := s.StartProcess(name, devstack.FindTools().Kueue(), "--config="+cfgFile, "--kubeconfig="+c.KubeconfigFile,
		"--feature-gates="+gates); err != nil {
		t.Fatal(err)
	}
	ready := fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[0])
	err = wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if i := slices.IndexFunc(s.Died(), func(d string) bool { return strings.HasPrefix(d, name+" ") }); i >= 0 {
			return false, errors.New(s.Died()[i])
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, ready, nil)
		if err != nil {
			return false, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, nil
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("Kueue on %s not ready: %v", c.Name, err)
	}
	kubectlApply(t, c, kueueWebhooks(t, s, kueueDir, ports[2]))
}

// loopbackPorts are n free ports on 127.0.0.1.
func loopbackPorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		_ = l.Close()
	}
	return ports
}

// kueueWebhooks is Kueue's own webhook manifest with each webhook of a kind
// it serves here (its own and batch Jobs) called at 127.0.0.1:port and
// trusted by the stack's CA; the rest (frameworks not enabled, whose paths
// it does not serve) are left out, or every pod create would fail.
func kueueWebhooks(t testing.TB, s *devstack.Stack, kueueDir string, port int) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(kueueDir, "config", "components", "webhook", "manifests.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(s.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, doc := range yamlDocs(t, data) {
		var obj map[string]any
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			t.Fatal(err)
		}
		var kept []any
		hooks, _ := obj["webhooks"].([]any)
		for _, h := range hooks {
			hook := h.(map[string]any)
			cc := hook["clientConfig"].(map[string]any)
			path := cc["service"].(map[string]any)["path"].(string)
			if !strings.Contains(path, "-kueue-x-k8s-io-") && !strings.HasSuffix(path, "-batch-v1-job") {
				continue
			}
			hook["clientConfig"] = map[string]any{"url": fmt.Sprintf("https://127.0.0.1:%d%s", port, path), "caBundle": ca}
			kept = append(kept, hook)
		}
		if len(kept) == 0 {
			t.Fatalf("Kueue's %s has no webhook for its own kinds or jobs", obj["kind"])
		}
		obj["webhooks"] = kept
		obj["metadata"] = map[string]any{"name": "kueue-" + obj["metadata"].(map[string]any)["name"].(string)}
		b, err := yaml.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(b))
	}
	return strings.Join(out, "---\n")
}

// kubectlApply applies manifests to c with kubectl, as an operator would.
func kubectlApply(t testing.TB, c *devstack.Cluster, manifests string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "objects.yaml")
	if err := os.WriteFile(file, []byte(manifests), 0o600); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(t.Context(), time.Second, time.Minute, true, func(context.Context) (bool, error) {
		out, err := kubectl(t, c.KubeconfigFile, "apply", "--server-side", "-f", file)
		if err != nil {
			t.Logf("kubectl apply on %s: %v\n%s", c.Name, err, out) // Kueue's webhooks may still be starting
		}
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("apply on %s:\n%s", c.Name, manifests)
	}
}

// queuesYAML is a flavor, a ClusterQueue of quota (with the named admission
// check, if any) and the LocalQueue jobs name.
func queuesYAML(admissionCheck string, quota kueueQuota) string {
	checks := ""
	if admissionCheck != "" {
		checks = "  admissionChecksStrategy:\n    admissionChecks:\n    - name: " + admissionCheck + "\n"
	}
	covered, gpus := "[cpu, memory]", ""
	if quota.gpus != "" {
		covered, gpus = "[cpu, memory, nvidia.com/gpu]", "      - {name: nvidia.com/gpu, nominalQuota: "+quota.gpus+"}\n"
	}
	return `apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: ` + covered + `
    flavors:
    - name: default
      resources:
      - {name: cpu, nominalQuota: ` + quota.cpu + `}
      - {name: memory, nominalQuota: ` + quota.memory + `}
` + gpus + checks + `---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: lq, namespace: ` + mkNamespace + `}
spec: {clusterQueue: cq}
`
}

// multiKueueYAML is the hub's MultiKueue: its admission check, its config
// over workers, and a MultiKueueCluster per worker naming the ClusterProfile
// of the same name in Kueue's namespace.
func multiKueueYAML(workers []*devstack.Cluster) string {
	var names []string
	y := `---
apiVersion: kueue.x-k8s.io/v1beta2
kind: AdmissionCheck
metadata: {name: multikueue}
spec:
  controllerName: kueue.x-k8s.io/multikueue
  parameters: {apiGroup: kueue.x-k8s.io, kind: MultiKueueConfig, name: crucible}
`
	for _, w := range workers {
		names = append(names, w.Name)
		y += `---
apiVersion: kueue.x-k8s.io/v1beta2
kind: MultiKueueCluster
metadata: {name: ` + w.Name + `}
spec:
  clusterSource:
    clusterProfileRef: {name: ` + w.Name + `}
`
	}
	return y + `---
apiVersion: kueue.x-k8s.io/v1beta2
kind: MultiKueueConfig
metadata: {name: crucible}
spec:
  clusters: [` + strings.Join(names, ", ") + `]
`
}

// waitMultiKueueClustersActive waits until the hub's Kueue says each
// MultiKueueCluster is Active: it reached the spoke through the
// ClusterProfile and `crucible credential`.
func waitMultiKueueClustersActive(t testing.TB, s *devstack.Stack, workers []*devstack.Cluster) {
	t.Helper()
	for _, w := range workers {
		var last string
		err := wait.PollUntilContextTimeout(t.Context(), time.Second, 2*time.Minute, true, func(context.Context) (bool, error) {
			out, err := kubectl(t, s.Hub.KubeconfigFile, "get", "multikueuecluster", w.Name, "-o", `jsonpath={.status.conditions[?(@.type=="Active")]}`)
			last = out
			return err == nil && strings.Contains(out, `"status":"True"`), nil
		})
		if err != nil {
			t.Fatalf("MultiKueueCluster %s not Active: %s", w.Name, last)
		}
	}
}

// ranJob is where MultiKueue ran a job.
type ranJob struct{ name, worker string }

// runJob submits a batch Job to the hub's LocalQueue and waits until the
// hub's copy is Complete (MultiKueue syncs the worker's status back). Its
// pod ran on exactly one worker, and the hub ran none.
func runJob(t testing.TB, s *devstack.Stack, workers []*devstack.Cluster, name string) ranJob {
	t.Helper()
	ctx := t.Context()
	kubectlApply(t, s.Hub, `apiVersion: batch/v1
kind: Job
metadata:
  name: `+name+`
  namespace: `+mkNamespace+`
  labels: {kueue.x-k8s.io/queue-name: lq}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: busybox
        command: [sh, -c, "echo `+name+` ran"]
        resources: {requests: {cpu: 100m, memory: 64Mi}}
`)
	// The worker's copy and its pod are deleted once the hub's job is done
	// (MultiKueue's clean-up), so the pods are looked for while it runs.
	var job *batchv1.Job
	ranOn := map[string]bool{}
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, w := range workers {
			pods, err := w.Client.CoreV1().Pods(mkNamespace).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + name})
			if err != nil {
				return false, err
			}
			if len(pods.Items) > 0 {
				ranOn[w.Name] = true
			}
		}
		var err error
		job, err = s.Hub.Client.BatchV1().Jobs(mkNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range job.Status.Conditions {
			if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
				return true, nil
			}
			if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
				return false, fmt.Errorf("job %s failed on the hub: %s", name, c.Message)
			}
		}
		return false, nil
	})
	if err != nil {
		// Kueue's MultiKueue can finish the Workload but leave the Job's
		// status unsynced (a stale read of the worker's Job): the Workload's
		// conditions tell that from a job that never ran.
		wl, _ := kubectl(t, s.Hub.KubeconfigFile, "get", "workloads.kueue.x-k8s.io", "-n", mkNamespace, "-o",
			"jsonpath={.items[?(@.metadata.ownerReferences[0].name==\""+name+"\")].status.conditions}")
		t.Fatalf("job %s not Complete on the hub: %v; job status %+v; its Workload's conditions %s", name, err, job.Status, wl)
	}
	if job.Status.Succeeded != 1 {
		t.Errorf("the hub's job %s says %d pods succeeded; want the worker's 1", name, job.Status.Succeeded)
	}
	if job.Spec.ManagedBy == nil || *job.Spec.ManagedBy != "kueue.x-k8s.io/multikueue" {
		t.Errorf("the hub's job %s is managed by %v; Kueue's webhook should have handed it to MultiKueue", name, job.Spec.ManagedBy)
	}
	if pods, err := s.Hub.Client.CoreV1().Pods(mkNamespace).List(ctx, metav1.ListOptions{}); err != nil || len(pods.Items) > 0 {
		t.Errorf("the hub has pods in %s (%v): the job should run only on a worker", mkNamespace, err)
	}
	// The hub's Workload names the worker MultiKueue chose.
	out, err := kubectl(t, s.Hub.KubeconfigFile, "get", "workloads.kueue.x-k8s.io", "-n", mkNamespace, "-o", "jsonpath={.items[?(@.metadata.ownerReferences[0].name==\""+name+"\")].status.clusterName}")
	if err != nil {
		t.Fatalf("the hub's Workload of %s: %v\n%s", name, err, out)
	}
	if len(ranOn) != 1 || !ranOn[out] {
		t.Fatalf("job %s had pods on %v and its Workload names cluster %q; want its pod on that one worker only", name, ranOn, out)
	}
	return ranJob{name: name, worker: out}
}

// waitCredentialRun waits until the plugin has run while every token file
// held the rotated token (hashes): client-go asked again and got it.
func waitCredentialRun(t testing.TB, runs string, hashes map[string]string) {
	t.Helper()
	var log []byte
	err := wait.PollUntilContextTimeout(t.Context(), time.Second, 3*time.Minute, true, func(context.Context) (bool, error) {
		var err error
		if log, err = os.ReadFile(runs); err != nil {
			return false, err
		}
		for run := range strings.SplitSeq(string(log), "run\n") {
			seen := 0
			for _, h := range hashes {
				if strings.Contains(run, h+" ") {
					seen++
				}
			}
			if seen == len(hashes) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the hub's Kueue never ran the plugin with the rotated tokens (%v); runs:\n%s", err, log)
	}
}

// credentialKeys are data keys of a Secret that would hold a way into a
// cluster: a kubeconfig, a token, a client key.
var credentialKeys = []string{"kubeconfig", "token", "tls.key", "client-key", "client.key"}

// noCredentialSecrets: c holds no Secret with a credential for a cluster.
func noCredentialSecrets(t testing.TB, c *devstack.Cluster) {
	t.Helper()
	secrets, err := c.Client.CoreV1().Secrets("").List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, sec := range secrets.Items {
		if sec.Type == corev1.SecretTypeServiceAccountToken {
			t.Errorf("%s holds service-account token Secret %s/%s", c.Name, sec.Namespace, sec.Name)
		}
		for key := range sec.Data {
			for _, bad := range credentialKeys {
				if strings.Contains(strings.ToLower(key), bad) {
					t.Errorf("%s holds Secret %s/%s with key %q", c.Name, sec.Namespace, sec.Name, key)
				}
			}
		}
	}
	names := make([]string, 0, len(secrets.Items))
	for _, sec := range secrets.Items {
		names = append(names, sec.Namespace+"/"+sec.Name)
	}
	t.Logf("%s: %d Secrets %v, none with a cluster credential", c.Name, len(names), names)
}

// wantAccess asks c's authorizer (a SubjectAccessReview, what kubectl auth
// can-i --as asks) whether user in groups may do each thing, both ways.
func wantAccess(t testing.TB, c *devstack.Cluster, user string, groups []string, want map[authorizationv1.ResourceAttributes]bool) {
	t.Helper()
	for attrs, allowed := range want {
		review, err := c.Client.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups, ResourceAttributes: &attrs},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if review.Status.Allowed != allowed {
			t.Errorf("on %s, %s may %s %s/%s in %q: %v; want %v", c.Name, user, attrs.Verb, attrs.Resource, attrs.Subresource, attrs.Namespace, review.Status.Allowed, allowed)
		}
	}
}

package devstack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"crucible.dev/crucible/internal/retry"
)

// The dev runtime is the kubelet of a dev-stack spoke's nodes, for
// development only: for each pod bound to one of them it runs the first
// container's command as a local process (the image is ignored), with the
// pod's env and volumes, as nobody in a process group of its own, and
// reports the pod's status. It serves the kubelet port every node of the
// spoke names, for pods/log. kwok still plays the nodes themselves (status,
// leases); it has no pod stages, so the runtime alone writes pod status.
// Attached stacks run it in-process; a detached stack runs it as `crucible
// dev runtime`.

// Pod isolation modes of the runtime.
const (
	// IsolationMountNamespace: each pod gets a private mount namespace in
	// which its volumes are bind-mounted at their mountPaths.
	IsolationMountNamespace = "mount-namespace"
	// IsolationPaths: no mount namespace; volumes stay in the pod's directory
	// and env values naming a mountPath are rewritten to point there.
	IsolationPaths = "paths"
)

// RuntimeConfig is what a dev runtime process needs; Start writes it to
// runtimeConfigFile for a detached stack.
type RuntimeConfig struct {
	// Dir is the stack's directory; pod logs go to Dir/pods.
	Dir string `json:"dir"`
	// CertFile and KeyFile serve the kubelet port; CAFile verifies the API
	// servers' kubelet client.
	CertFile string `json:"certFile"`
	KeyFile  string `json:"keyFile"`
	CAFile   string `json:"caFile"`
	// Crucible is the crucible binary every pod finds first on its PATH
	// (for `crucible push`); "": none.
	Crucible string `json:"crucible"`
	// Isolation is IsolationMountNamespace or IsolationPaths.
	Isolation string `json:"isolation"`
	// PodNetwork: every pod gets a network namespace of its own (podnet.go);
	// only with IsolationMountNamespace.
	PodNetwork bool `json:"podNetwork,omitempty"`
	// Detached: pods are not killed with the runtime's parent.
	Detached bool           `json:"detached"`
	Spokes   []RuntimeSpoke `json:"spokes"`
}

// RuntimeSpoke is one spoke whose nodes the runtime plays the kubelet of,
// all on one port.
type RuntimeSpoke struct {
	Name       string   `json:"name"`
	Kubeconfig string   `json:"kubeconfig"`
	Nodes      []string `json:"nodes"`
	Port       int      `json:"port"`
}

const runtimeConfigFile = "runtime.json"

// nodeRuntime runs the pods of one spoke's nodes.
type nodeRuntime struct {
	cfg    RuntimeConfig
	spoke  string
	nodes  []string
	client kubernetes.Interface
	logDir string
	// podBase holds the pods' volumes and working directories. It is outside
	// the stack directory, whose parents the pods' user may not traverse.
	podBase string
	// binDir holds the pods' crucible (installCrucible); first on every
	// pod's PATH.
	binDir string
	// caBundle is the file SSL_CERT_FILE names in every pod: see
	// writeCABundle.
	caBundle string
	log      func(string, ...any)

	ctx  context.Context
	mu   sync.Mutex
	pods map[types.UID]*podRun
	// logRequests counts the pods/log requests the API server made to this
	// node, per namespace/name: one per pods/log request at the API server.
	logRequests map[string]int
	wg          sync.WaitGroup
}

// runtimeHandle stops a running runtime.
type runtimeHandle struct {
	cancel context.CancelFunc
	stop   func()
	nodes  []*nodeRuntime
}

// startRuntime starts a runtime for every spoke of cfg and returns once each
// serves its kubelet port and watches its pods.
func startRuntime(ctx context.Context, cfg RuntimeConfig, log func(string, ...any)) (*runtimeHandle, error) {
	rctx, cancel := context.WithCancel(context.Background())
	var nodes []*nodeRuntime
	var servers []*http.Server
	stop := func() {
		cancel()
		for _, s := range servers {
			_ = s.Close()
		}
		for _, n := range nodes {
			n.wg.Wait()
			_ = os.RemoveAll(n.podBase)
		}
	}
	removeStalePodDirs(os.TempDir(), log)
	for _, sp := range cfg.Spokes {
		n, err := newNodeRuntime(rctx, cfg, sp, log)
		if err != nil {
			stop()
			return nil, err
		}
		nodes = append(nodes, n)
		srv, err := n.newLogServer(cfg.CertFile, cfg.KeyFile, cfg.CAFile)
		if err != nil {
			stop()
			return nil, err
		}
		if _, err := n.listenAndServe(srv, sp.Port); err != nil {
			stop()
			return nil, err
		}
		servers = append(servers, srv)
		if err := n.watch(ctx); err != nil {
			stop()
			return nil, err
		}
	}
	return &runtimeHandle{cancel: cancel, stop: stop, nodes: nodes}, nil
}

func newNodeRuntime(ctx context.Context, cfg RuntimeConfig, sp RuntimeSpoke, log func(string, ...any)) (*nodeRuntime, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", sp.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("runtime for %s: %w", sp.Name, err)
	}
	rc.QPS, rc.Burst = 100, 200
	rc.Dial = dialPatiently
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	logDir := filepath.Join(cfg.Dir, "pods", sp.Name)
	if err := os.MkdirAll(logDir, 0o700); err != nil {
		return nil, fmt.Errorf("create pod log dir: %w", err)
	}
	base, err := os.MkdirTemp("", podDirPrefix+sp.Name+"-"+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return nil, fmt.Errorf("create pod dir: %w", err)
	}
	// Traversable, not listable: each pod's user reaches only its own dir.
	if err := os.Chmod(base, 0o711); err != nil {
		return nil, err
	}
	bundle, err := writeCABundle(base, cfg.CAFile)
	if err != nil {
		_ = os.RemoveAll(base)
		return nil, err
	}
	binDir, err := installCrucible(base, cfg.Crucible)
	if err != nil {
		_ = os.RemoveAll(base)
		return nil, err
	}
	return &nodeRuntime{
		cfg: cfg, spoke: sp.Name, nodes: sp.Nodes, client: client, logDir: logDir, podBase: base, binDir: binDir,
		caBundle: bundle, log: log, ctx: ctx, pods: map[types.UID]*podRun{},
	}, nil
}

// installCrucible puts the crucible binary at base/bin/crucible, where every
// pod's user can run it, and returns that directory ("" without a binary).
// The binary itself may lie below a directory only its owner may traverse —
// root's home after `go install`, a `mktemp -d` — and a pod runs as nobody:
// every `crucible push` then failed with "Permission denied" (exit 127). A
// hard link keeps the one copy when base is on the binary's file system.
func installCrucible(base, bin string) (string, error) {
	if bin == "" {
		return "", nil
	}
	dir := filepath.Join(base, "bin")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", err
	}
	dst := filepath.Join(dir, "crucible")
	if err := os.Link(bin, dst); err == nil {
		if fi, err := os.Stat(dst); err == nil && fi.Mode().Perm()&0o005 == 0o005 {
			return dir, nil
		}
		_ = os.Remove(dst) // linked, but not runnable by others: copy it with mode 0755
	}
	if err := copyFile(bin, dst, 0o755); err != nil {
		return "", fmt.Errorf("install crucible for the pods: %w", err)
	}
	return dir, nil
}

// copyFile copies src to a new file dst of mode perm.
func copyFile(src, dst string, perm os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Chmod(dst, perm) // the umask does not narrow it
}

// podDirPrefix starts the name of a node's pod directory in the system's
// temp dir: podDirPrefix + spoke + "-" + pid + "-" + random. The pid names
// the process that made it, so a later stack can remove the directories of
// one that was killed before its cleanup ran.
const podDirPrefix = "crucible-pods-"

// removeStalePodDirs removes the pod directories in tmp whose process is
// gone (a test binary or `crucible dev` killed with SIGKILL): they hold
// volumes, possibly secrets, and nobody else would ever remove them.
func removeStalePodDirs(tmp string, log func(string, ...any)) {
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return
	}
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || !strings.HasPrefix(name, podDirPrefix) {
			continue
		}
		parts := strings.Split(name, "-")
		if len(parts) < 5 {
			continue // an older name without the pid: not ours to judge
		}
		pid, err := strconv.Atoi(parts[len(parts)-2])
		if err != nil || pid <= 0 || processAlive(pid) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(tmp, name)); err == nil {
			log("devstack: removed %s, left by process %d which is gone", name, pid)
		}
	}
}

// processAlive reports whether pid exists (signal 0 checks without
// sending; EPERM means it exists under another user).
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// systemRoots are where Go (and OpenSSL) look for the system's CA bundle on
// Linux; the first that exists is used.
var systemRoots = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem",
	"/etc/pki/tls/cacert.pem",
	"/etc/ssl/cert.pem",
}

// writeCABundle writes the system's roots plus the stack's CA into dir,
// readable by the pods' user, and returns its path. The drop-box's
// certificate is signed by the stack's CA; a pod trusts it through
// SSL_CERT_FILE (honoured by Go, OpenSSL and curl), as a real node trusts
// the cluster's CA, so `crucible push` in a dev pod needs no --ca-file.
func writeCABundle(dir, caFile string) (string, error) {
	if caFile == "" {
		return "", nil
	}
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return "", fmt.Errorf("read the stack's CA: %w", err)
	}
	var bundle []byte
	for _, f := range systemRoots {
		if roots, err := os.ReadFile(f); err == nil {
			bundle = append(roots, '\n')
			break
		}
	}
	path := filepath.Join(dir, "ca-bundle.crt")
	if err := os.WriteFile(path, append(bundle, ca...), 0o644); err != nil {
		return "", fmt.Errorf("write the pods' CA bundle: %w", err)
	}
	return path, nil
}

// dialPatiently dials address again every 100 ms while it is refused, until
// ctx ends: the runtime then waits out its spoke's API server restarting
// inside one request, as its pod informers' next list. Were the refusals
// failures, client-go's reflector would back off after each, and after an
// outage or two in a row hold the runtime away from the restarted spoke for
// up to a minute (30 s, jittered up to twice that), its pods unstarted.
func dialPatiently(ctx context.Context, network, address string) (net.Conn, error) {
	var d net.Dialer
	for {
		conn, err := d.DialContext(ctx, network, address)
		if err == nil || !errors.Is(err, syscall.ECONNREFUSED) {
			return conn, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// watch follows the pods of the spoke's nodes and waits for their first
// list. A field selector cannot name several nodes, and one on
// spec.nodeName!="" would cache every bound pod of the spoke, so each node
// has an informer of its own; they share the handlers.
func (r *nodeRuntime) watch(ctx context.Context) error {
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.sync(obj) },
		UpdateFunc: func(_, obj any) { r.sync(obj) },
		DeleteFunc: func(obj any) { r.forget(obj) },
	}
	synced := make([]cache.InformerSynced, 0, len(r.nodes))
	for _, node := range r.nodes {
		factory := informers.NewSharedInformerFactoryWithOptions(r.client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
		}))
		inf := factory.Core().V1().Pods().Informer()
		if _, err := inf.AddEventHandler(handler); err != nil {
			return err
		}
		factory.Start(r.ctx.Done())
		synced = append(synced, inf.HasSynced)
	}
	wctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	if !cache.WaitForCacheSync(wctx.Done(), synced...) {
		return fmt.Errorf("runtime for %s: pod informer did not sync", r.spoke)
	}
	return nil
}

// sync reacts to a pod's latest state: a new pod starts, a deleted one is
// stopped and finalised.
func (r *nodeRuntime) sync(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || r.ctx.Err() != nil {
		return
	}
	r.mu.Lock()
	p := r.pods[pod.UID]
	if p == nil {
		if pod.DeletionTimestamp == nil && (pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed) {
			r.mu.Unlock()
			return // finished before this runtime started
		}
		p = newPodRun(pod)
		r.pods[pod.UID] = p
		if pod.DeletionTimestamp != nil {
			p.requestDelete(pod) // before run looks: it then never starts
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.run(p, pod.DeepCopy())
		}()
	}
	r.mu.Unlock()
	if pod.DeletionTimestamp != nil {
		p.requestDelete(pod)
	}
}

// forget drops a pod whose object is gone, killing its process if any is
// left (a pod force-deleted without a grace period).
func (r *nodeRuntime) forget(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	r.mu.Lock()
	p := r.pods[pod.UID]
	delete(r.pods, pod.UID)
	r.mu.Unlock()
	if p != nil {
		p.markGone()
	}
}

// lookup returns the live pod called namespace/name.
func (r *nodeRuntime) lookup(namespace, name string) *podRun {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.pods {
		if p.namespace == namespace && p.name == name && !p.isGone() {
			return p
		}
	}
	return nil
}

// RunRuntime runs the dev runtime described by the config file in dir until
// ctx ends, then kills every pod process; `crucible dev runtime` runs it for
// a detached stack.
func RunRuntime(ctx context.Context, dir string) error {
	data, err := os.ReadFile(filepath.Join(dir, runtimeConfigFile))
	if err != nil {
		return err
	}
	var cfg RuntimeConfig
	if err := json.Unmarshal(data, &cfg); err != nil {
		return fmt.Errorf("read %s: %w", runtimeConfigFile, err)
	}
	h, err := startRuntime(ctx, cfg, func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) })
	if err != nil {
		return err
	}
	<-ctx.Done()
	h.stop()
	return nil
}

// errRetry stands for an error worth another try whatever its kind.
var errRetry = errors.New("retry")

// errPodGone: the pod object no longer exists (or is another pod's now).
var errPodGone = errors.New("pod is gone")

// retryAPI retries fn until it succeeds, reports errPodGone, or ctx ends:
// the runtime must not lose a status update to an API server restart — nor
// to the 403s a restarted API server answers until it is ready, as a
// kubelet retries them (retry.NotReady).
func (r *nodeRuntime) retryAPI(ctx context.Context, fn func(context.Context) error) error {
	delay := 100 * time.Millisecond
	for {
		err := fn(ctx)
		if retry.IsTransient(retry.NotReady(ctx, r.client.Discovery().RESTClient(), err)) && ctx.Err() == nil {
			err = errRetry
		}
		var fail *podFailure
		if err == nil || errors.Is(err, errPodGone) || errors.As(err, &fail) || ctx.Err() != nil ||
			apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, 2*time.Second)
	}
}

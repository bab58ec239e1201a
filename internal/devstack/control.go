package devstack

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"crucible.dev/crucible/internal/fleet"
	"crucible.dev/crucible/internal/profile"
)

// Tests use these to take parts of a running stack away and bring them back:
// an API server outage, a signing-key rotation.

// StopAPIServer stops c's kube-apiserver, as an outage would. Clients of c
// then fail with connection errors until StartAPIServer.
func (s *Stack) StopAPIServer(c *Cluster) error {
	p := s.proc("kube-apiserver-" + c.Name)
	if p == nil {
		return fmt.Errorf("no kube-apiserver for %s", c.Name)
	}
	p.stop()
	return nil
}

// StartAPIServer starts c's kube-apiserver again on the same port with the
// same flags (or with args, if given) and waits until it is ready.
func (s *Stack) StartAPIServer(ctx context.Context, c *Cluster) error {
	return s.restartAPIServer(ctx, c, nil)
}

func (s *Stack) restartAPIServer(ctx context.Context, c *Cluster, args []string) error {
	return s.restart(ctx, "kube-apiserver-"+c.Name, args, c.Ready)
}

// RotateServiceAccountKey gives c a new signing key, keeping the old one as a
// verification key, as an operator rotating keys would: tokens signed before
// stay valid, new tokens carry the new key id, and the JWKS lists both.
func (s *Stack) RotateServiceAccountKey(ctx context.Context, c *Cluster) error {
	name := "kube-apiserver-" + c.Name
	old := s.proc(name)
	if old == nil {
		return fmt.Errorf("no kube-apiserver for %s", c.Name)
	}
	n := 1
	for _, a := range old.args {
		if strings.HasPrefix(a, "--service-account-key-file=") {
			n++
		}
	}
	key, err := newServiceAccountKey(c.dir, fmt.Sprintf("service-account-%d", n))
	if err != nil {
		return err
	}
	var args []string
	for _, a := range old.args {
		if strings.HasPrefix(a, "--service-account-signing-key-file=") {
			a = "--service-account-signing-key-file=" + key.PrivateFile
		}
		args = append(args, a)
	}
	args = append(args, "--service-account-key-file="+key.PublicFile)
	if err := s.restartAPIServer(ctx, c, args); err != nil {
		return err
	}
	c.ServiceAccountKey = key
	return nil
}

// KillProcess kills a process of the stack with SIGKILL, as a crash would:
// no shutdown handler runs.
func (s *Stack) KillProcess(name string) error {
	p := s.proc(name)
	if p == nil {
		return fmt.Errorf("no process %s", name)
	}
	p.ended.Store(true)
	_ = p.cmd.Process.Kill()
	<-p.done
	return nil
}

// Died lists the stack's processes that ended without the stack stopping or
// killing them (a crash, a signal from outside), each with its exit status
// and the last lines of its log: what a failed test prints, since the
// stack's directory goes with it.
func (s *Stack) Died() []string {
	var died []string
	for _, p := range s.procs {
		if p.exited() && !p.ended.Load() {
			died = append(died, fmt.Sprintf("%s (pid %d) ended by itself: %v; last lines of %s:\n%s", p.Name, p.PID(), p.waitErr, p.LogFile, LogTail(p.LogFile, 20)))
		}
	}
	return died
}

// RestartProcess starts a stopped or killed process again with the same
// command line and waits until ready reports nil.
func (s *Stack) RestartProcess(ctx context.Context, name string, ready func(context.Context) error) error {
	return s.restart(ctx, name, nil, ready)
}

// restart stops the process called name if it still runs, starts it again
// with args (nil: its old ones) and waits until ready reports nil. A detached
// stack's record then names the new PID.
func (s *Stack) restart(ctx context.Context, name string, args []string, ready func(context.Context) error) error {
	i := slices.IndexFunc(s.procs, func(p *process) bool { return p.Name == name })
	if i < 0 {
		return fmt.Errorf("no process %s", name)
	}
	old := s.procs[i]
	old.stop()
	if args == nil {
		args = old.args
	}
	p, err := startProcess(name, old.path, args, old.LogFile, s.opts.Detached)
	if err != nil {
		return err
	}
	p.ready = ready
	s.procs[i] = p
	if err := p.waitReady(ctx, startTimeout, ready); err != nil {
		return err
	}
	if s.opts.Detached {
		return s.writeState()
	}
	return nil
}

// ControllerReady is the readiness check of the stack's controller.
func (s *Stack) ControllerReady(ctx context.Context) error {
	return get(ctx, s.httpClient(), s.Federation.ControllerInternalURL+"/readyz")
}

// WebhookReady is the readiness check of spoke's authn webhook as its
// kube-apiserver sees it: over TLS, with the apiserver's client certificate.
func (s *Stack) WebhookReady(spoke string) func(context.Context) error {
	return func(ctx context.Context) error {
		c, err := s.httpClientAs(s.Federation.WebhookClientCerts[spoke])
		if err != nil {
			return err
		}
		return get(ctx, c, s.Federation.WebhookURLs[spoke]+"/readyz")
	}
}

// PauseProcess stops a process of the stack with SIGSTOP: it keeps its
// sockets, so clients connect and then hear nothing — an unreachable host,
// not a refused connection. ResumeProcess continues it.
func (s *Stack) PauseProcess(name string) error {
	return s.signal(name, syscall.SIGSTOP)
}

// ResumeProcess continues a process PauseProcess stopped (SIGCONT).
func (s *Stack) ResumeProcess(name string) error {
	return s.signal(name, syscall.SIGCONT)
}

// HangUpProcess sends a process of the stack SIGHUP: the controller
// reloads its profile on it.
func (s *Stack) HangUpProcess(name string) error {
	return s.signal(name, syscall.SIGHUP)
}

// signal sends sig to a running process of the stack, by its PID only.
func (s *Stack) signal(name string, sig syscall.Signal) error {
	p := s.proc(name)
	if p == nil {
		return fmt.Errorf("no process %s", name)
	}
	if p.exited() {
		return fmt.Errorf("signal %s: %w", name, ErrProcessExited)
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %s: %w", name, err)
	}
	return nil
}

// settleTimeout bounds SettleSpoke: its restarts and probe pods take
// seconds, but the dev runtime still backs off after failures other than a
// refused connection (an API server answering before it is ready), up to a
// minute after many in a row, and a loaded machine adds to that.
const settleTimeout = 3 * time.Minute

// SettleSpoke waits until spoke c works as a whole again after its API
// server was restarted. /readyz alone does not say so: a restarted
// kube-apiserver may still refuse the controller's identity for a moment
// (its RBAC cache has not synced; crucible answers its callers 503 then),
// the spoke's node agents lost their watches (restartStaleAgents), and the
// drop-box answers the spoke's pods 503 until it has fetched the spoke's
// keys again (dropBoxVerifies). Tests sharing a stack call it after
// restarting a spoke, so the next test finds the spoke as it would at any
// other time. Every node of the spoke runs a probe pod.
func (s *Stack) SettleSpoke(ctx context.Context, c *Cluster) error {
	ctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	if err := s.restartStaleAgents(ctx, c); err != nil {
		return err
	}
	if s.Federation != nil {
		if err := s.controllerServed(ctx, c); err != nil {
			return err
		}
		if err := s.dropBoxVerifies(ctx, c); err != nil {
			return err
		}
	}
	return each(c.Nodes, func(n NodeSpec) error { return s.settleNode(ctx, c, n) })
}

// restartStaleAgents restarts those of spoke c's node agents (kwok,
// kube-scheduler, kube-controller-manager) that have run since before c's
// kube-apiserver last started. Each lost its watches to that restart and
// reconnects with client-go's reflector backoff, which after an outage or
// two in a row keeps it away for up to a minute (30 s, jittered up to twice
// that) — a probe pod waited 40 s to be scheduled — while a fresh one lists
// at once. Crucible's tests observe none of them directly; the dev runtime,
// whose pods they do observe, is not restarted: it waits out an API server
// restart by itself (dialPatiently). An agent that ended by itself is left
// for Died to report.
func (s *Stack) restartStaleAgents(ctx context.Context, c *Cluster) error {
	api := s.proc("kube-apiserver-" + c.Name)
	if api == nil {
		return nil
	}
	for _, prefix := range []string{"kwok-", "kube-scheduler-", "kube-controller-manager-"} {
		p := s.proc(prefix + c.Name)
		if p == nil || p.exited() || p.ready == nil || !p.started.Before(api.started) {
			continue
		}
		if err := s.restart(ctx, p.Name, nil, p.ready); err != nil {
			return fmt.Errorf("settle %s: %w", c.Name, err)
		}
	}
	return nil
}

// settleNode runs a probe pod on node n of spoke c — through the scheduler,
// pinned by hostname and tolerating the node's taints — and reads its log.
func (s *Stack) settleNode(ctx context.Context, c *Cluster, n NodeSpec) error {
	pods := c.Client.CoreV1().Pods(c.LoopNamespace)
	probe, err := pods.Create(ctx, settleProbe(n), metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("settle %s: create probe pod for node %s: %w", c.Name, n.Name, err)
	}
	defer func() {
		zero := int64(0)
		_ = pods.Delete(context.WithoutCancel(ctx), probe.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	}()
	var phase corev1.PodPhase
	err = wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := pods.Get(ctx, probe.Name, metav1.GetOptions{})
		if err == nil {
			phase = p.Status.Phase
		}
		return phase == corev1.PodSucceeded || phase == corev1.PodFailed, nil
	})
	if err != nil {
		return fmt.Errorf("settle %s: probe pod %s for node %s still %q: %w", c.Name, probe.Name, n.Name, phase, err)
	}
	if phase != corev1.PodSucceeded {
		return fmt.Errorf("settle %s: probe pod %s %s", c.Name, probe.Name, phase)
	}
	// Its log, through the API server, the node's address and the dev
	// runtime's kubelet port: what log collection needs of the spoke.
	var last error
	err = wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		var raw []byte
		raw, last = pods.GetLogs(probe.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if last == nil && string(raw) != "settled\n" {
			last = fmt.Errorf("log %q, want %q", raw, "settled\n")
		}
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("settle %s: the log of probe pod %s: %w (%w); %s", c.Name, probe.Name, last, err, s.NodeSummary(context.WithoutCancel(ctx), c))
	}
	return nil
}

// settleProbe is a pod that only node n takes.
func settleProbe(n NodeSpec) *corev1.Pod {
	tolerations := make([]corev1.Toleration, 0, len(n.Taints))
	for _, t := range n.Taints {
		tolerations = append(tolerations, corev1.Toleration{Key: t.Key, Operator: corev1.TolerationOpExists, Effect: t.Effect})
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "settle-"},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			NodeSelector:  map[string]string{corev1.LabelHostname: n.Name},
			Tolerations:   tolerations,
			Containers:    []corev1.Container{{Name: "probe", Image: "probe", Command: []string{"echo", "settled"}}},
		},
	}
}

// NodeSummary says what spoke c's nodes report: their addresses, kubelet
// port, conditions and taints — what a failed test prints about a spoke its
// pods' logs cannot be read from.
func (s *Stack) NodeSummary(ctx context.Context, c *Cluster) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	summaries := make([]string, 0, len(c.Nodes))
	for _, spec := range c.Nodes {
		summaries = append(summaries, nodeSummary(ctx, c, spec.Name))
	}
	return strings.Join(summaries, " | ")
}

func nodeSummary(ctx context.Context, c *Cluster, name string) string {
	n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Sprintf("node %s: %v", name, err)
	}
	var conds []string
	for _, cd := range n.Status.Conditions {
		conds = append(conds, fmt.Sprintf("%s=%s (%s, heartbeat %s)", cd.Type, cd.Status, cd.Reason, cd.LastHeartbeatTime.UTC().Format(time.TimeOnly)))
	}
	var taints []string
	for _, t := range n.Spec.Taints {
		taints = append(taints, t.Key+":"+string(t.Effect))
	}
	return fmt.Sprintf("node %s created %s, resourceVersion %s, addresses %v, kubelet port %d, conditions [%s], taints %v",
		n.Name, n.CreationTimestamp.UTC().Format(time.TimeOnly), n.ResourceVersion, n.Status.Addresses,
		n.Status.DaemonEndpoints.KubeletEndpoint.Port, strings.Join(conds, "; "), taints)
}

// settleSource is the client address (X-Forwarded-For, the stack trusts
// loopback as a proxy) of dropBoxVerifies' probes, so the 503s they may be
// answered are charged to no address a test uses (RFC 5737 TEST-NET-3).
const settleSource = "203.0.113.254"

// dropBoxVerifies waits until the drop-box verifies spoke c's tokens again.
// A fetch of c's signing keys that failed during the outage leaves every
// token no loaded key verifies answered 503 until the next fetch, at most
// once per MinRefresh: the spoke might have signed it (fail closed). The
// probe is a token of c's turn service account bound to no pod, sent for a
// pod id no row has: 503 while c's keys cannot decide, then 403 (bound to
// another pod) before any store read or TokenReview.
func (s *Stack) dropBoxVerifies(ctx context.Context, c *Cluster) error {
	ns := c.LoopNamespace
	if ns == "" {
		ns = SpokeNamespace
	}
	token, err := c.TokenRequest(ctx, ns, SpokeServiceAccount, []string{IngestAudience}, 600, nil)
	if err != nil {
		return fmt.Errorf("settle %s: a token for the drop-box probe: %w", c.Name, err)
	}
	client := s.httpClient()
	defer client.CloseIdleConnections()
	var last string
	err = wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.Federation.ControllerExternalURL+"/api/pods/crucible-settle-probe/artifacts/probe", nil)
		if err != nil {
			return false, err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("X-Forwarded-For", settleSource)
		resp, err := client.Do(req)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		last = fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(body)))
		switch resp.StatusCode {
		case http.StatusForbidden:
			return true, nil
		case http.StatusServiceUnavailable, http.StatusTooManyRequests:
			return false, nil
		}
		return false, fmt.Errorf("settle %s: the drop-box answered its probe %s, want 403", c.Name, last)
	})
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("settle %s: the drop-box still cannot verify its tokens (last answer: %s): %w", c.Name, last, err)
	}
	return err
}

// controllerServed waits until spoke c lets the controller's identity list
// the loop namespace's pods, as its watch and sweep do.
func (s *Stack) controllerServed(ctx context.Context, c *Cluster) error {
	clients, err := fleet.NewClients([]profile.ClusterEntry{s.ClusterEntry(c)})
	if err != nil {
		return err
	}
	controller, _ := clients.Get(c.Name)
	var last error
	err = wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, last = controller.Kube.CoreV1().Pods(c.LoopNamespace).List(ctx, metav1.ListOptions{Limit: 1})
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("settle %s: the controller's identity is still refused: %w (%w)", c.Name, last, err)
	}
	return nil
}

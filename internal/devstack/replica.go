package devstack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// HA in the stack (R-C10): with Options.LeaderElect and a PostgreSQL
// ControllerStore, StartController adds controller replicas beside the
// stack's own — the same instance, store and hub identity, other ports —
// as a Deployment with several replicas would run them.

// DefaultLeaseDuration is the stack's lease when Options.LeaseDuration is 0.
const DefaultLeaseDuration = 15 * time.Second

// leaseRoleName names the hub Role that lets the controller hold its Lease.
const leaseRoleName = "crucible-controller-leader-election"

// replicaPorts are one controller process's listeners.
type replicaPorts struct {
	internal, external, metrics int
	externalURL                 string
}

// Replica is a controller process that StartController added.
type Replica struct {
	// Process names it for KillProcess and RestartProcess.
	Process string
	// InternalURL serves its API, ExternalURL its drop-box and mirror (and
	// the ingest URL of the pods it dispatches), MetricsURL its /metrics.
	InternalURL, ExternalURL, MetricsURL string
	// ProfileFile is its crucible.toml.
	ProfileFile string

	ports replicaPorts // what ReplicaProfile renders
}

// Controller is the stack's own controller as a Replica, beside those
// StartController adds.
func (s *Stack) Controller() Replica {
	f := s.Federation
	if f == nil {
		return Replica{}
	}
	return Replica{Process: "crucible-controller", InternalURL: f.ControllerInternalURL, ExternalURL: f.ControllerExternalURL,
		MetricsURL: f.ControllerMetricsURL, ProfileFile: f.ProfileFile,
		ports: replicaPorts{internal: f.internalPort, external: f.externalPort, metrics: f.metricsPort, externalURL: f.ControllerExternalURL}}
}

func (s *Stack) lease() time.Duration {
	if s.opts.LeaseDuration > 0 {
		return s.opts.LeaseDuration
	}
	return DefaultLeaseDuration
}

// grantLease lets the controller's hub identity hold its leader Lease in
// the hub namespace (get, list, create, update, delete on leases), when the stack runs
// leader election.
func (s *Stack) grantLease(ctx context.Context) error {
	if !s.opts.LeaderElect {
		return nil
	}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: leaseRoleName, Namespace: HubNamespace},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"},
			Verbs: []string{"get", "list", "create", "update", "delete"}}},
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: leaseRoleName, Namespace: HubNamespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: leaseRoleName},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: HubServiceAccount, Namespace: HubNamespace}},
	}
	for _, obj := range []runtime.Object{role, binding} {
		if err := createObject(ctx, s.Hub, obj); err != nil {
			return fmt.Errorf("grant the controller its lease: %w", err)
		}
	}
	return nil
}

// StartController starts another replica of the stack's controller called
// name (a DNS label) on free ports and waits until it is ready. It needs
// Options.LeaderElect and a postgres:// ControllerStore: replicas on SQLite
// are refused by the controller itself.
func (s *Stack) StartController(ctx context.Context, name string) (*Replica, error) {
	return s.startReplica(ctx, name, s.listed())
}

// StartControllerWith is StartController with a profile that lists spokes
// (by name, in that order), as a replica joining after a reload has.
func (s *Stack) StartControllerWith(ctx context.Context, name string, spokes ...string) (*Replica, error) {
	cs, err := s.spokesNamed(spokes)
	if err != nil {
		return nil, fmt.Errorf("start controller %s: %w", name, err)
	}
	return s.startReplica(ctx, name, cs)
}

func (s *Stack) startReplica(ctx context.Context, name string, spokes []*Cluster) (*Replica, error) {
	f := s.Federation
	if f == nil {
		return nil, fmt.Errorf("start controller %s: the stack runs no federation", name)
	}
	ports, err := s.freePorts(3)
	if err != nil {
		return nil, err
	}
	rp := replicaPorts{internal: ports[0], external: ports[1], metrics: ports[2], externalURL: "https://" + s.podHost() + ":" + strconv.Itoa(ports[1])}
	dir := filepath.Join(s.Dir, "crucible")
	profile := filepath.Join(dir, "crucible-"+name+".toml")
	if err := os.WriteFile(profile, []byte(s.profile(dir, rp, spokes)), 0o644); err != nil {
		return nil, err
	}
	r := &Replica{
		Process: "crucible-controller-" + name, ProfileFile: profile, ExternalURL: rp.externalURL, ports: rp,
		InternalURL: "http://127.0.0.1:" + strconv.Itoa(rp.internal), MetricsURL: "http://127.0.0.1:" + strconv.Itoa(rp.metrics),
	}
	p, err := s.start(r.Process, s.opts.Crucible, []string{"controller", "--config=" + profile})
	if err != nil {
		return nil, err
	}
	client := s.httpClient()
	if err := p.waitReady(ctx, startTimeout, func(ctx context.Context) error {
		return get(ctx, client, r.InternalURL+"/readyz")
	}); err != nil {
		return nil, err
	}
	s.opts.Progress("crucible controller replica %s ready: internal %s, external %s", name, r.InternalURL, r.ExternalURL)
	return r, nil
}

// WaitExit waits until the stack's process called name has exited on its
// own and returns its exit code and the path of its log.
func (s *Stack) WaitExit(ctx context.Context, name string) (code int, logFile string, err error) {
	p := s.proc(name)
	if p == nil {
		return 0, "", fmt.Errorf("no process %s", name)
	}
	select {
	case <-ctx.Done():
		return 0, p.LogFile, fmt.Errorf("wait for %s to exit: %w", name, ctx.Err())
	case <-p.done:
	}
	return p.cmd.ProcessState.ExitCode(), p.LogFile, nil
}

package devstack

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Issuer is the service-account issuer of the hub and of every spoke: the
// shared default of ADR-0048.
const Issuer = "https://kubernetes.default.svc"

// Identities the stack creates, as the real clusters of ADR-0048 have them.
const (
	HubNamespace        = "crucible"
	HubServiceAccount   = "crucible-controller"
	SpokeNamespace      = "loops"
	SpokeServiceAccount = "crucible-turn"
	DefaultSpokeName    = "wharf"
	hubName             = "hub"
	startTimeout        = 90 * time.Second
	stopGrace           = 10 * time.Second
	// apiserverStopGrace is a kube-apiserver's: on SIGTERM it stops listening
	// and drains its short requests within milliseconds here, then holds its
	// open watch streams until --request-timeout (a minute) runs out. Every
	// client of the stack re-watches anyway, so waiting longer only slows
	// each outage a test makes and each restart.
	apiserverStopGrace = 2 * time.Second
)

// Options says what stack to start. The zero value starts a hub and one spoke
// named wharf in a temporary directory.
type Options struct {
	// Dir holds certificates, kubeconfigs, logs and etcd's data. Empty means a
	// temporary directory that Stop removes.
	Dir string
	// Spokes to run; empty means one spoke named wharf.
	Spokes []SpokeOptions
	// Tools locates the binaries; the zero value means FindTools().
	Tools Tools
	// Detached processes outlive this process; `crucible dev down` stops them.
	Detached bool
	// RuntimeProcess runs the dev runtime as a process of the stack, as a
	// detached stack does, while the stack stays attached (it ends with
	// this process): a benchmark whose load generator runs in this process
	// keeps the runtime's work for the pods off the generator's goroutines.
	RuntimeProcess bool
	// Progress receives one line per step; nil discards them.
	Progress func(format string, args ...any)
	// ExtraAPIServerArgs are appended to every kube-apiserver's flags.
	ExtraAPIServerArgs []string

	// Crucible is the path of a crucible binary. If set, the stack also runs
	// the federation (see Federation): the controller with its discovery
	// mirror on the hub and an authn webhook per spoke.
	Crucible string
	// MirrorTTL and MirrorMaxStale tune the controller's discovery mirror
	// (defaults 5s and 10m: short, so a rotated hub key shows quickly).
	MirrorTTL, MirrorMaxStale time.Duration
	// RuntimeBinary is a crucible binary that runs a detached stack's dev
	// runtime (`crucible dev runtime`); default Crucible. Attached stacks run
	// the runtime in this process.
	RuntimeBinary string
	// NoPodMountNamespace makes the dev runtime run pods without a private
	// mount namespace even where it could use one: volumes then stay in the
	// pod's directory and env values naming a mountPath are rewritten. Tests
	// use it to cover that fallback.
	NoPodMountNamespace bool
	// NoPodNetwork makes the dev runtime run pods in the host's network even
	// where each could have a network namespace of its own (podnet.go):
	// the controller then listens on loopback and run-live is unavailable.
	// Tests use it to cover that fallback.
	NoPodNetwork bool

	// SweepInterval, OrphanGrace and RetryBudget tune the controller's
	// reconciler (defaults 5s, 30s, 2m); DrainTimeout, when set, is its
	// reconcile.drain_timeout.
	SweepInterval, OrphanGrace, RetryBudget, DrainTimeout time.Duration
	// IngestMinFreeBytes is the drop-box's free-space floor on the artifact
	// volume (zero: the controller's default, 1 GiB). Tests that fill a
	// small volume set it low.
	IngestMinFreeBytes int64

	// ClusterProfiles, when set, is the hub namespace whose ClusterProfiles
	// the controller's profile reads as spokes ([fleet] cluster_profiles):
	// the hub serves the CRD and grants the controller what it needs
	// (clusterprofiles.go). ClusterProfileSelector narrows them by label.
	ClusterProfiles, ClusterProfileSelector string
	// ClusterProfilePins adds [fleet] server_pins: a pins file, as `render
	// clusterprofile --server-pins` writes it, of every spoke's server and
	// the stack's CA, so that a ClusterProfile becomes a spoke only with
	// its pinned server.
	ClusterProfilePins bool

	// SpokesPerServer, above 1, lets that many spokes share one API server
	// (guests.go): Spokes are taken in order, the first of every group runs
	// the server and the others are its guests, each with its own audience,
	// token, loop namespace and webhook provider. 0 or 1: a server each.
	SpokesPerServer int

	// DefaultCluster is the profile's default_cluster; empty: the first
	// spoke (the tests name where their pods go). `crucible dev up` says
	// "auto": a submit that names no cluster is placed.
	DefaultCluster string

	// ControllerStore is the controller's store DSN; empty: SQLite in the
	// stack's directory. With a postgres:// DSN artifacts live there too.
	ControllerStore string
	// LeaderElect runs the controller with [controller] leader_elect and a
	// lease of LeaseDuration (default 15s), granting its hub identity the
	// Lease; StartController adds replicas (see replica.go).
	LeaderElect   bool
	LeaseDuration time.Duration
	// SingleLeader, with LeaderElect, runs every spoke's loops on one
	// leader ([leader_election] single_leader) instead of a Lease per
	// spoke.
	SingleLeader bool
	// PodNodeSelector is the profile's [pods] node_selector, in every
	// controller's profile: the benchmarks name a label no node has, so
	// the pods they dispatch stay unscheduled and cost the spokes no
	// running.
	PodNodeSelector map[string]string
	// RunLiveOpensPerMinute, when set, is the profile's [run_live]
	// opens_per_minute: a benchmark holding a hundred sessions as one
	// caller opens more than the default's 60 a minute.
	RunLiveOpensPerMinute int
	// ControllerPprofListen is the first controller's --pprof-listen (a
	// loopback HOST:PORT; empty: off): a benchmark's controller is
	// profiled under the benchmark's own load, which no other process can
	// reproduce. devstacktest.Start takes it from $CRUCIBLE_CONTROLLER_PPROF.
	ControllerPprofListen string
	// APIServerProfiling serves every kube-apiserver's /debug/pprof (its
	// --profiling, off otherwise, as on a cluster hardened to the CIS
	// benchmark): a spoke's API server is profiled under a benchmark's own
	// load. devstacktest.Start takes it from $CRUCIBLE_APISERVER_PROFILING.
	APIServerProfiling bool
}

// SpokeOptions configures one spoke cluster.
type SpokeOptions struct {
	// Name is a DNS label; it names the kubeconfig file and env variables.
	Name string
	// TokenWebhook, if set, makes the spoke's kube-apiserver ask this webhook
	// about bearer tokens it cannot validate itself.
	TokenWebhook *TokenWebhook
	// Issuer overrides the spoke's service-account issuer (default Issuer).
	// kube-apiserver refuses an AuthenticationConfig whose JWT issuer equals
	// its own, so a spoke using its built-in authenticator for hub tokens
	// needs a different one.
	Issuer string
	// BuiltinHubAuthn makes a federated spoke validate hub tokens with
	// kube-apiserver's own structured JWT authenticator (--authentication-config,
	// keys from the controller's mirror, the same rules as the webhook's)
	// instead of crucible's webhook. It needs an Issuer of its own. Benchmarks
	// compare the two paths.
	BuiltinHubAuthn bool
	// Nodes are the spoke's nodes; empty means DefaultNodes(Name).
	Nodes []NodeSpec
	// NoCapacity leaves capacity off for this spoke in the controller's
	// profile and its RBAC: placement has no view of it, and a pod placed
	// there that cannot start moves on by spill-over alone.
	NoCapacity bool
	// NoRunLive leaves run_live off for this spoke in the controller's
	// profile and its RBAC, where the stack would turn it on (pods have
	// networks of their own).
	NoRunLive bool
	// TokenRequest makes the controller's profile entry for this spoke say
	// token_source = "request": no token file is written for it, the
	// controller asks the hub's TokenRequest API for its tokens, and the
	// stack grants it render.HubTokenRequestRBAC on the hub.
	TokenRequest bool
	// Unlisted leaves the spoke out of the profile the controller starts
	// with: a test adds it to the running controller by writing a profile
	// that lists it (ControllerProfile), as an operator adds a spoke.
	Unlisted bool
}

// TokenWebhook is where a spoke's kube-apiserver sends TokenReviews.
type TokenWebhook struct {
	URL string
	// CAFile verifies an https URL; empty for http or the stack's own CA.
	CAFile string
	// CacheTTL is how long kube-apiserver caches answers (default 10s).
	CacheTTL time.Duration
	// ClientCertFile and ClientKeyFile, if set, are kube-apiserver's client
	// certificate for the webhook.
	ClientCertFile, ClientKeyFile string
}

// Stack is a running hub and its spokes.
type Stack struct {
	Dir     string
	CAFile  string
	EtcdURL string
	Hub     *Cluster
	Spokes  []*Cluster
	// Federation is nil unless Options.Crucible was set.
	Federation *Federation

	// PodIsolation is how the dev runtime runs pods: IsolationMountNamespace
	// or IsolationPaths.
	PodIsolation string
	// PodNetwork: every pod has a network namespace of its own, reaching
	// the host at PodGateway (where the controller's external listener
	// is); false: pods share the host's network.
	PodNetwork bool

	ca          *CA
	opts        Options
	kubelet     *kubelet
	stopKubelet context.CancelFunc
	runtime     *runtimeHandle
	// guests are the spokes without a server of their own, by the order
	// of Options.Spokes (whose place opts.Spokes, the servers, takes).
	guests    []guestSpoke
	procs     []*process
	removeDir bool
	stopOnce  sync.Once
	// ports are the ports this stack claimed (freePorts), released by Stop.
	portsMu sync.Mutex
	ports   []int
}

// Cluster is one running kube-apiserver and, for spokes, what runs its pods.
type Cluster struct {
	Name string
	// Server is the API server's URL, https://127.0.0.1:<port>.
	Server string
	// KubeconfigFile holds an admin (system:masters) identity.
	KubeconfigFile string
	// Admin is a REST config with the admin identity; Client uses it.
	Admin  *rest.Config
	Client kubernetes.Interface
	// ServiceAccountKey signs the cluster's service-account tokens.
	ServiceAccountKey ServiceAccountKey
	// Nodes (spokes) are the kwok nodes pods are scheduled onto; the dev
	// runtime runs the pods of all of them.
	Nodes []NodeSpec
	// NodeName is the first of Nodes: by default the CPU node, where a pod
	// that tolerates no taint lands.
	NodeName string
	// RunLive: the controller's profile sets run_live for this spoke, and
	// its RBAC here grants pods/portforward.
	RunLive bool
	// Host is the spoke whose API server and nodes this one shares
	// (Options.SpokesPerServer); "" for a spoke that runs its own.
	Host string
	// LoopNamespace is where the controller runs this spoke's pods:
	// SpokeNamespace, or loops-<name> on a shared server.
	LoopNamespace string

	dir string
}

// Spoke returns the spoke called name, or nil.
func (s *Stack) Spoke(name string) *Cluster {
	for _, c := range s.Spokes {
		if c.Name == name {
			return c
		}
	}
	return nil
}

func (o *Options) setDefaults() {
	if len(o.Spokes) == 0 {
		o.Spokes = []SpokeOptions{{Name: DefaultSpokeName}}
	}
	o.Spokes = slices.Clone(o.Spokes) // the caller's slice stays as it was
	for i := range o.Spokes {
		if len(o.Spokes[i].Nodes) == 0 {
			o.Spokes[i].Nodes = DefaultNodes(o.Spokes[i].Name)
		}
	}
	if o.SpokesPerServer == 0 {
		o.SpokesPerServer = 1
	}
	if o.Tools.Dir == "" {
		o.Tools = FindTools()
	}
	if o.Progress == nil {
		o.Progress = func(string, ...any) {}
	}
	if o.MirrorTTL == 0 {
		o.MirrorTTL = 5 * time.Second
	}
	if o.MirrorMaxStale == 0 {
		o.MirrorMaxStale = 10 * time.Minute
	}
	if o.SweepInterval == 0 {
		o.SweepInterval = 5 * time.Second
	}
	if o.OrphanGrace == 0 {
		o.OrphanGrace = 30 * time.Second
	}
	if o.RetryBudget == 0 {
		o.RetryBudget = 2 * time.Minute
	}
}

// validate reports every problem with the options at once.
func (o *Options) validate() error {
	var errs []error
	seen := map[string]bool{hubName: true}
	for i, s := range o.Spokes {
		for _, msg := range validation.IsDNS1123Label(s.Name) {
			errs = append(errs, fmt.Errorf("spokes[%d].name %q: %s", i, s.Name, msg))
		}
		if seen[s.Name] {
			errs = append(errs, fmt.Errorf("spokes[%d].name %q: used twice (or is the hub's name)", i, s.Name))
		}
		seen[s.Name] = true
		if s.BuiltinHubAuthn && (s.Issuer == "" || s.Issuer == Issuer) {
			errs = append(errs, fmt.Errorf("spokes[%d].issuer: a spoke with builtinHubAuthn needs an issuer other than %s (kube-apiserver refuses to overlap them)", i, Issuer))
		}
		if s.BuiltinHubAuthn && o.Crucible == "" {
			errs = append(errs, fmt.Errorf("spokes[%d].builtinHubAuthn: needs the federation (Crucible) for the mirror", i))
		}
		if s.TokenWebhook != nil && s.TokenWebhook.URL == "" {
			errs = append(errs, fmt.Errorf("spokes[%d].tokenWebhook.url: required", i))
		}
		errs = append(errs, validateNodes(fmt.Sprintf("spokes[%d]", i), s.Nodes)...)
	}
	errs = append(errs, validateGuests(o)...)
	if (o.Detached || o.RuntimeProcess) && o.RuntimeBinary == "" && o.Crucible == "" {
		errs = append(errs, errors.New("runtimeBinary: a detached stack, or one whose runtime is a process of its own, needs a crucible binary to run its dev runtime"))
	}
	return errors.Join(errs...)
}

// Start starts a stack and returns when every part is ready: API servers
// answer /readyz, each spoke's node is Ready and untainted, the identities
// exist. On failure everything already started is stopped again.
func Start(ctx context.Context, opts Options) (_ *Stack, err error) {
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("invalid stack options: %w", err)
	}
	if err := opts.Tools.Check(); err != nil {
		return nil, err
	}
	s := &Stack{opts: opts}
	s.opts.Spokes, s.guests = groupSpokes(opts.Spokes, opts.SpokesPerServer)
	if opts.Dir == "" {
		dir, err := os.MkdirTemp("", "crucible-devstack-")
		if err != nil {
			return nil, err
		}
		s.Dir, s.removeDir = dir, true
	} else {
		dir, err := filepath.Abs(opts.Dir)
		if err != nil {
			return nil, err
		}
		s.Dir = dir
	}
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()
	began := time.Now()
	if err := s.prepare(); err != nil {
		return nil, err
	}
	if err := s.startEtcd(ctx); err != nil {
		return nil, err
	}
	s.choosePodIsolation()
	if err := s.planFederation(); err != nil {
		return nil, err
	}
	if err := s.startAPIServers(ctx); err != nil {
		return nil, err
	}
	if err := s.createIdentities(ctx); err != nil {
		return nil, err
	}
	if err := s.startFederation(ctx); err != nil {
		return nil, err
	}
	if err := s.startNodes(ctx); err != nil {
		return nil, err
	}
	if err := s.writeState(); err != nil {
		return nil, err
	}
	opts.Progress("stack ready in %s (dir %s)", time.Since(began).Round(100*time.Millisecond), s.Dir)
	return s, nil
}

// prepare lays out the directory and writes the CA, certificates and keys.
func (s *Stack) prepare() error {
	if err := os.MkdirAll(filepath.Join(s.Dir, "logs"), 0o755); err != nil {
		return fmt.Errorf("create stack dir: %w", err)
	}
	// A directory reused from an earlier stack must not leak its old etcd data
	// or logs into this one.
	for _, stale := range []string{"etcd", stateFile} {
		if err := os.RemoveAll(filepath.Join(s.Dir, stale)); err != nil {
			return err
		}
	}
	logs, _ := filepath.Glob(filepath.Join(s.Dir, "logs", "*.log"))
	for _, l := range logs {
		_ = os.Remove(l)
	}
	ca, err := newCA()
	if err != nil {
		return err
	}
	s.ca = ca
	s.CAFile = filepath.Join(s.Dir, "ca.crt")
	if err := os.WriteFile(s.CAFile, ca.CertPEM, 0o644); err != nil {
		return err
	}
	return nil
}

// LogFile is where the stack writes the output of its process name
// ("crucible-controller", "kube-apiserver-wharf", …).
func (s *Stack) LogFile(name string) string { return filepath.Join(s.Dir, "logs", name+".log") }

func (s *Stack) start(name, path string, args []string) (*process, error) {
	p, err := startProcess(name, path, args, s.LogFile(name), s.opts.Detached)
	if err != nil {
		return nil, err
	}
	s.procs = append(s.procs, p)
	return p, nil
}

// each runs fn for every cluster at once and joins the errors: the API servers
// and node agents start in parallel, which halves a stack's start time.
func each[T any](items []T, fn func(T) error) error {
	errs := make([]error, len(items))
	var wg sync.WaitGroup
	for i, it := range items {
		wg.Go(func() { errs[i] = fn(it) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Stop ends every process the stack started, last started first, and removes
// the directory if the stack made it. It is safe to call more than once.
func (s *Stack) Stop() {
	s.stopOnce.Do(func() {
		if s.stopKubelet != nil {
			s.stopKubelet()
		}
		if s.runtime != nil {
			s.runtime.stop() // kills every pod's process group
		}
		var wg sync.WaitGroup
		for rank := range stopRanks {
			for _, p := range s.procs {
				if stopRank(p.Name) == rank {
					wg.Go(p.stop)
				}
			}
			wg.Wait()
		}
		if s.removeDir {
			_ = os.RemoveAll(s.Dir)
		}
		s.portsMu.Lock()
		releasePorts(s.ports)
		s.ports = nil
		s.portsMu.Unlock()
	})
}

// stopGraceOf is how long the process called name is given to end after
// SIGTERM before it is killed.
func stopGraceOf(name string) time.Duration {
	if strings.HasPrefix(name, "kube-apiserver-") {
		return apiserverStopGrace
	}
	return stopGrace
}

// stopRank orders shutdown: node agents and crucible first, then the API
// servers, then etcd, so nothing spends its last seconds logging connection
// errors. Stop and StopDir both follow it.
func stopRank(name string) int {
	switch {
	case strings.HasPrefix(name, "etcd"):
		return 2
	case strings.HasPrefix(name, "kube-apiserver"):
		return 1
	}
	return 0
}

const stopRanks = 3

// Processes returns the name and PID of everything the stack started.
func (s *Stack) Processes() map[string]int {
	m := make(map[string]int, len(s.procs))
	for _, p := range s.procs {
		m[p.Name] = p.PID()
	}
	return m
}

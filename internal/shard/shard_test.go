package shard_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
	"crucible.dev/crucible/internal/shard"
)

func TestMain(m *testing.M) { os.Exit(devstacktest.Main(m, devstack.Options{})) }

const prefix = "crucible"

// Short leases, so that a takeover takes seconds.
const (
	leaseDuration = 3 * time.Second
	renewDeadline = 2 * time.Second
	retryPeriod   = 500 * time.Millisecond
)

// runs records every spoke's runs across the replicas of a test and fails
// it when a run starts while another runs for the same spoke, or with an
// epoch not above the spoke's last one. A run lingers after its context
// ends, as loops winding down do, so a lease released too early shows.
type runs struct {
	t       *testing.T
	mu      sync.Mutex
	running map[string]string // spoke → identity running it
	epoch   map[string]int64  // spoke → epoch of its last run
}

const linger = 200 * time.Millisecond

func (r *runs) run(id string) func(context.Context, string, int64) {
	return func(ctx context.Context, spoke string, epoch int64) {
		r.mu.Lock()
		if other, ok := r.running[spoke]; ok {
			r.t.Errorf("%s started %s at epoch %d while %s still runs it", id, spoke, epoch, other)
		}
		if epoch <= r.epoch[spoke] {
			r.t.Errorf("%s started %s at epoch %d, not above its last epoch %d", id, spoke, epoch, r.epoch[spoke])
		}
		r.running[spoke], r.epoch[spoke] = id, epoch
		r.mu.Unlock()
		<-ctx.Done()
		time.Sleep(linger)
		r.mu.Lock()
		delete(r.running, spoke)
		r.mu.Unlock()
	}
}

// snapshot returns who runs each spoke and each spoke's last epoch.
func (r *runs) snapshot() (running map[string]string, epoch map[string]int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	running, epoch = map[string]string{}, map[string]int64{}
	for k, v := range r.running {
		running[k] = v
	}
	for k, v := range r.epoch {
		epoch[k] = v
	}
	return running, epoch
}

// gate stands in a replica's transport: closed, every request hangs until
// its context ends, as for a replica cut off from the hub.
type gate struct {
	mu   sync.Mutex
	open chan struct{} // closed while the gate is open
}

func newGate() *gate {
	g := &gate{open: make(chan struct{})}
	close(g.open)
	return g
}

func (g *gate) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		g.mu.Lock()
		open := g.open
		g.mu.Unlock()
		select {
		case <-open:
			return rt.RoundTrip(r)
		case <-r.Context().Done():
			return nil, r.Context().Err()
		}
	})
}

func (g *gate) shut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open = make(chan struct{})
}

func (g *gate) reopen() {
	g.mu.Lock()
	defer g.mu.Unlock()
	close(g.open)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// env is one test's namespace on the shared hub and its replicas' runs.
type env struct {
	t     *testing.T
	hub   *devstack.Cluster
	ns    string
	runs  *runs
	fleet *fleet
}

// fleet is the spokes() of every replica of a test; tests change it.
type fleet struct {
	mu     sync.Mutex
	spokes []string
}

func (f *fleet) get() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.spokes)
}

func (f *fleet) set(spokes []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.spokes = slices.Clone(spokes)
}

func spokeNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("spoke-%02d", i)
	}
	return out
}

func newEnv(t *testing.T, ns string, spokes []string) *env {
	t.Helper()
	s := devstacktest.Shared(t)
	_, err := s.Hub.Client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.Hub.Client.CoreV1().Namespaces().Delete(context.WithoutCancel(t.Context()), ns, metav1.DeleteOptions{})
	})
	return &env{t: t, hub: s.Hub, ns: ns, runs: &runs{t: t, running: map[string]string{}, epoch: map[string]int64{}}, fleet: &fleet{spokes: spokes}}
}

// replica is one Assigner running in the test.
type replica struct {
	id   string
	a    *shard.Assigner
	gate *gate
	stop context.CancelFunc
	done chan error
}

func (e *env) options(kube kubernetes.Interface, id string) shard.Options {
	return shard.Options{Kube: kube, Namespace: e.ns, Prefix: prefix, Identity: id,
		LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod,
		Log: slog.New(slog.NewTextHandler(e.t.Output(), nil)).With("replica", id)}
}

// start runs a replica named like the controller names its own: host name
// and a UUID. It is stopped, and waited for, when the test ends.
func (e *env) start(host string) *replica {
	e.t.Helper()
	g := newGate()
	cfg := rest.CopyConfig(e.hub.Admin)
	cfg.QPS, cfg.Burst = 200, 400
	cfg.WrapTransport = g.wrap
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	r := &replica{id: host + "_" + string(uuid.NewUUID()), gate: g, done: make(chan error, 1)}
	if r.a, err = shard.New(e.options(kube, r.id)); err != nil {
		e.t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.WithoutCancel(e.t.Context()))
	r.stop = stop
	go func() { r.done <- r.a.Run(ctx, e.fleet.get, e.runs.run(r.id)) }()
	e.t.Cleanup(func() { r.halt(e.t) })
	return r
}

// halt stops r and waits for Run to return.
func (r *replica) halt(t *testing.T) {
	t.Helper()
	r.gate.reopenIfShut()
	r.stop()
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("%s: Run = %v, want nil", r.id, err)
		}
		r.done <- nil // a second halt returns at once
	case <-time.After(time.Minute):
		t.Errorf("%s: Run did not return a minute after its context ended", r.id)
	}
}

func (g *gate) reopenIfShut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

// lease reads spoke's Lease: its holder ("" if none or not found) and
// epoch.
func (e *env) lease(spoke string) (holder string, epoch int64) {
	e.t.Helper()
	l, err := e.hub.Client.CoordinationV1().Leases(e.ns).Get(e.t.Context(), prefix+"-spoke-"+spoke, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", 0
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return ptr.Deref(l.Spec.HolderIdentity, ""), int64(ptr.Deref(l.Spec.LeaseTransitions, 0))
}

// waitFor polls cond until it holds; it fails the test with cond's last
// word after a generous deadline.
func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still not so after 45s: %s", what, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// balanced: each of rs owns lo to hi spokes, together the fleet once; each
// spoke runs on its owner alone, its Lease names that owner, and every
// replica's Owners says so.
func (e *env) balanced(lo, hi int, rs ...*replica) func() (bool, string) {
	return func() (bool, string) {
		owner := map[string]string{}
		var loads []string
		for _, r := range rs {
			owned := r.a.Owned()
			loads = append(loads, fmt.Sprint(len(owned)))
			if len(owned) < lo || len(owned) > hi {
				return false, fmt.Sprintf("loads %s, want %d to %d each", strings.Join(loads, ","), lo, hi)
			}
			for _, s := range owned {
				if other, dup := owner[s]; dup {
					return false, fmt.Sprintf("%s owned by %s and %s", s, other, r.id)
				}
				owner[s] = r.id
			}
		}
		fleet := e.fleet.get()
		running, _ := e.runs.snapshot()
		for _, s := range fleet {
			if owner[s] == "" {
				return false, fmt.Sprintf("%s owned by nobody", s)
			}
			if running[s] != owner[s] {
				return false, fmt.Sprintf("%s owned by %s, run by %q", s, owner[s], running[s])
			}
			if holder, _ := e.lease(s); holder != owner[s] {
				return false, fmt.Sprintf("%s owned by %s, its Lease held by %q", s, owner[s], holder)
			}
		}
		if len(running) != len(fleet) {
			return false, fmt.Sprintf("%d runs for %d spokes: %v", len(running), len(fleet), running)
		}
		for _, r := range rs {
			got := r.a.Owners()
			for _, s := range fleet {
				if got[s] != owner[s] {
					return false, fmt.Sprintf("%s's Owners()[%s] = %q, want %s", r.id, s, got[s], owner[s])
				}
			}
			if len(got) != len(fleet) {
				return false, fmt.Sprintf("%s's Owners() has %d spokes, want %d", r.id, len(got), len(fleet))
			}
		}
		return true, ""
	}
}

// epochs reads the Lease epoch of each of spokes.
func (e *env) epochs(spokes []string) map[string]int64 {
	out := map[string]int64{}
	for _, s := range spokes {
		_, out[s] = e.lease(s)
	}
	return out
}

// wantHigher checks that each spoke's Lease is at a higher epoch than in
// before, held by one of holders.
func (e *env) wantHigher(before map[string]int64, holders ...*replica) {
	e.t.Helper()
	for s, old := range before {
		holder, now := e.lease(s)
		if now <= old {
			e.t.Errorf("%s at epoch %d after moving, want above %d", s, now, old)
		}
		if !slices.ContainsFunc(holders, func(r *replica) bool { return r.id == holder }) {
			e.t.Errorf("%s held by %q after moving, want one of the remaining replicas", s, holder)
		}
	}
}

// Package shard owns the split of the fleet's spokes among the controller's
// replicas: each spoke is acted on by exactly one replica at a time, the one
// holding that spoke's Lease on the hub, and the spokes are spread evenly
// over the live replicas, moving when a replica dies or joins.
//
// Two replicas never act on one spoke at once: a replica stops acting on a
// spoke (cancels its run) once it cannot prove by its own monotonic clock
// that it still holds the lease — RenewDeadline after the last renewal that
// succeeded was sent, before the lease could have run out for anyone else —
// and it releases a lease only after the spoke's run has returned. Every
// Lease write is conditional on the resourceVersion read, so two replicas
// never both believe they won. The epoch handed to a run (the Lease's
// leaseTransitions) grows with every new holder, so the store can refuse a
// write from a replica that was paused past its lease and resumed.
package shard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
)

// Options configure an Assigner. Every field is required.
type Options struct {
	// Kube is a client of the hub, where the Leases live. Its rate limit
	// must allow about (spokes held + 2) requests per RetryPeriod: a renewal
	// held back by the client's limiter counts against RenewDeadline.
	Kube kubernetes.Interface
	// Namespace holds the Leases (the profile's lease_namespace).
	Namespace string
	// Prefix names the Leases: <Prefix>-spoke-<cluster> per spoke and
	// <Prefix>-member-<hash of Identity> per replica. It is also the value
	// of their crucible.dev/shard label, hence a DNS label.
	Prefix string
	// Identity names this replica; it must differ from every other
	// replica's, also from the previous run of the same pod.
	Identity string
	// LeaseDuration is how long others wait after the last renewal they saw
	// before taking a spoke over; the Lease records it in whole seconds.
	// RenewDeadline is how long after its last successful renewal a holder
	// keeps acting on a spoke; RetryPeriod the time between renewals and
	// between looks at the assignment. As in client-go's leaderelection.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	Log                                       *slog.Logger
}

// validate reports every problem with o at once, naming the field.
func (o Options) validate() error {
	var errs []error
	if o.Kube == nil {
		errs = append(errs, required("Kube"))
	}
	for _, f := range []struct{ name, v string }{{"Namespace", o.Namespace}, {"Prefix", o.Prefix}} {
		if f.v == "" {
			errs = append(errs, required(f.name))
			continue
		}
		for _, msg := range validation.IsDNS1123Label(f.v) {
			errs = append(errs, fmt.Errorf("%s %q: %s", f.name, f.v, msg))
		}
	}
	if o.Identity == "" {
		errs = append(errs, required("Identity"))
	}
	switch {
	case o.LeaseDuration < time.Second:
		errs = append(errs, fmt.Errorf("LeaseDuration %s: must be at least 1s", o.LeaseDuration))
	case o.LeaseDuration%time.Second != 0:
		// Rounded down in the Lease, others would see a shorter lease than
		// the one RenewDeadline was checked against.
		errs = append(errs, fmt.Errorf("LeaseDuration %s: must be whole seconds (the Lease records seconds)", o.LeaseDuration))
	}
	if o.RenewDeadline <= 0 || o.RenewDeadline >= o.LeaseDuration {
		errs = append(errs, fmt.Errorf("RenewDeadline %s: must be positive and less than LeaseDuration %s", o.RenewDeadline, o.LeaseDuration))
	}
	if o.RetryPeriod <= 0 || o.RetryPeriod >= o.RenewDeadline {
		errs = append(errs, fmt.Errorf("RetryPeriod %s: must be positive and less than RenewDeadline %s", o.RetryPeriod, o.RenewDeadline))
	}
	if o.Log == nil {
		errs = append(errs, required("Log"))
	}
	return errors.Join(errs...)
}

func required(field string) error { return fmt.Errorf("%s: required", field) }

// Assigner keeps this replica's share of the spokes; see Run.
type Assigner struct {
	o       Options
	member  string // this replica's member Lease
	running atomic.Bool

	mu     sync.Mutex
	held   map[string]*holding // spoke → this replica's lease of it, until released
	owners map[string]string   // spoke → holder, as last seen

	// Used by Run's goroutine only.
	seen        map[string]sighting  // Lease name → its version and when this replica first saw it
	freeSince   map[string]time.Time // spoke → when this replica first saw it free
	memberLease *coordinationv1.Lease
	refused     map[string]bool // spoke names that cannot name a Lease, logged once
}

// holding is one spoke lease this replica holds.
type holding struct {
	spoke string
	epoch int64
	ctx   context.Context    // the run's; ended: the run has been told to stop
	stop  context.CancelFunc // cancels ctx
}

// leaving: the run has been told to stop, the lease is not yet released.
func (h *holding) leaving() bool { return h.ctx.Err() != nil }

// New checks o and returns an Assigner that does nothing until Run.
func New(o Options) (*Assigner, error) {
	if err := o.validate(); err != nil {
		return nil, fmt.Errorf("shard options: %w", err)
	}
	return &Assigner{
		o:         o,
		member:    memberLeaseName(o.Prefix, o.Identity),
		held:      map[string]*holding{},
		owners:    map[string]string{},
		seen:      map[string]sighting{},
		freeSince: map[string]time.Time{},
		refused:   map[string]bool{},
	}, nil
}

// Run keeps this replica's share of spokes() until ctx ends; spokes is read
// every RetryPeriod, as the fleet may change. For each spoke won, run is
// called in a goroutine of its own with the lease's epoch; its ctx is
// cancelled when this replica must stop acting on the spoke (lease given up
// for balance, renewal failing for RenewDeadline, spoke gone from spokes(),
// ctx ending), and the lease is released only after run has returned. A run
// that returns by itself gives its lease up. When ctx ends, Run returns nil
// after every run has returned and the leases and the member Lease are
// released.
func (a *Assigner) Run(ctx context.Context, spokes func() []string, run func(ctx context.Context, spoke string, epoch int64)) error {
	if !a.running.CompareAndSwap(false, true) {
		return errors.New("shard: Run is already running")
	}
	defer a.running.Store(false)
	var holds sync.WaitGroup
	defer a.leave(ctx, &holds)
	a.o.Log.Info("joining the spoke assignment", "namespace", a.o.Namespace, "member", a.member, "identity", a.o.Identity)
	tick := time.NewTicker(a.o.RetryPeriod)
	defer tick.Stop()
	// The first look only observes: replicas started together then see one
	// another's member Leases before any takes a share.
	for act := false; ; act = true {
		a.step(ctx, spokes(), act, func(h *holding, l *coordinationv1.Lease, sent time.Time) {
			holds.Go(func() { a.hold(h.ctx, h, l, sent, run) })
		})
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// leave waits for every held spoke's run to return and its lease to be
// released, then deletes the member Lease so that the others count one
// replica less at once.
func (a *Assigner) leave(ctx context.Context, holds *sync.WaitGroup) {
	holds.Wait()
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.o.RenewDeadline)
	defer cancel()
	if err := a.deleteMember(dctx); err != nil {
		a.o.Log.Warn("could not delete the member lease; it expires by itself", "lease", a.member, "err", err)
	}
	a.mu.Lock()
	a.owners = map[string]string{}
	a.mu.Unlock()
	a.o.Log.Info("left the spoke assignment", "member", a.member)
}

// Owners returns the holder of each spoke of the fleet as this replica last
// read or wrote its Lease, "" for a spoke nobody holds. Any replica can
// answer it, follower or not.
func (a *Assigner) Owners() map[string]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]string, len(a.owners))
	for s, h := range a.owners {
		out[s] = h
	}
	for s := range a.held {
		if _, ok := out[s]; ok {
			out[s] = a.o.Identity
		}
	}
	return out
}

// Owned returns the spokes this replica acts on now, sorted: those whose run
// has not been told to stop.
func (a *Assigner) Owned() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for s, h := range a.held {
		if !h.leaving() {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// giveUp tells the run of spoke to stop; its lease is released once the
// run has returned.
func (a *Assigner) giveUp(spoke, why string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	h := a.held[spoke]
	if h == nil || h.leaving() {
		return
	}
	h.stop()
	a.o.Log.Info("giving up a spoke", "spoke", spoke, "epoch", h.epoch, "reason", why)
}

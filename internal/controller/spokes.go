package controller

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"crucible.dev/crucible/internal/fleet"
	"crucible.dev/crucible/internal/metrics"
	"crucible.dev/crucible/internal/reconcile"
	"crucible.dev/crucible/internal/shard"
	"crucible.dev/crucible/internal/store"
)

// spokeLoops runs each spoke's reconcile loops (reconcile.RunCluster) and
// keeps them in step with the fleet as reloads change it: a spoke added
// gets its loops, a changed one has its old loops ended and new ones
// started on its new client, and a removed one keeps its loops while it
// drains, then they end and its client is forgotten. Which spokes run here
// is all of them (run), or this replica's share (runSharded).
type spokeLoops struct {
	rec          *reconcile.Reconciler
	clients      *fleet.Clients
	drainTimeout time.Duration
	// forgotten is told when a drained spoke's client is dropped (the
	// drop-box then stops validating its pods).
	forgotten func()
	log       *slog.Logger

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every change of the fleet
	// owners, with sharding, says who runs each spoke (/api/clusters).
	owners func() map[string]string
}

func newSpokeLoops(rec *reconcile.Reconciler, clients *fleet.Clients, drainTimeout time.Duration, forgotten func(), log *slog.Logger) *spokeLoops {
	return &spokeLoops{rec: rec, clients: clients, drainTimeout: drainTimeout, forgotten: forgotten, log: log, changed: make(chan struct{})}
}

// fleetChanged tells every spoke's loops, and run, that the clients
// changed.
func (s *spokeLoops) fleetChanged() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.changed)
	s.changed = make(chan struct{})
}

// changes is closed at the next change of the fleet.
func (s *spokeLoops) changes() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// Owners is who runs each spoke's loops, with sharding; nil without.
func (s *spokeLoops) Owners() map[string]string {
	s.mu.Lock()
	owners := s.owners
	s.mu.Unlock()
	if owners == nil {
		return nil
	}
	return owners()
}

// run runs every spoke's loops until ctx ends, then waits for them.
func (s *spokeLoops) run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	running := map[string]chan struct{}{} // spoke → closed when its runSpoke returned
	for {
		changes := s.changes()
		for _, c := range s.clients.All() {
			name := c.Entry.Name
			if done, ok := running[name]; ok {
				select {
				case <-done: // drained and forgotten, and listed again
				default:
					continue
				}
			}
			done := make(chan struct{})
			running[name] = done
			wg.Go(func() {
				defer close(done)
				s.runSpoke(ctx, name)
			})
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changes:
		}
	}
}

// runSharded runs the loops of this replica's share of the spokes, each
// only while it holds that spoke's Lease (package shard), every store
// write of them fenced by the lease's epoch: a replica paused past its
// lease and resumed cannot overwrite what the spoke's next owner wrote.
func (s *spokeLoops) runSharded(ctx context.Context, a *shard.Assigner) error {
	s.mu.Lock()
	s.owners = a.Owners
	s.mu.Unlock()
	names := func() []string {
		var out []string
		for _, c := range s.clients.All() {
			out = append(out, c.Entry.Name)
		}
		return out
	}
	return a.Run(ctx, names, func(ctx context.Context, spoke string, epoch int64) {
		fenced := store.WithFence(ctx, spoke, epoch)
		if !s.claim(fenced, spoke, epoch) {
			return
		}
		s.log.Info("running the spoke's loops", "cluster", spoke, "epoch", epoch)
		s.runSpoke(fenced, spoke)
		s.log.Info("stopped the spoke's loops", "cluster", spoke, "epoch", epoch)
	})
}

// claimRetry is how soon a claim of a spoke's epoch that the store could
// not answer is tried again.
const claimRetry = 2 * time.Second

// claim records a won spoke's epoch in the store before its loops write
// anything: from then on the previous owner's writes are refused. A store
// that cannot answer is asked again until ctx ends (the lease is kept
// meanwhile: another replica would meet the same store); a newer epoch
// there means this lease is stale, and the spoke is given up.
func (s *spokeLoops) claim(ctx context.Context, spoke string, epoch int64) bool {
	for {
		err := s.rec.Store.ClaimEpoch(ctx, spoke, epoch)
		switch {
		case err == nil:
			return true
		case errors.Is(err, store.ErrFenced):
			s.log.Error("the store has a newer epoch of the spoke: giving it up", "cluster", spoke, "epoch", epoch, "error", err)
			return false
		}
		s.log.Warn("cannot claim the spoke's epoch in the store; retrying", "cluster", spoke, "epoch", epoch, "error", err)
		t := time.NewTimer(claimRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
}

// runSpoke runs the loops of spoke name until ctx ends: on its client,
// moving to a new one when a reload changes its entry; while it drains,
// until the drain ends, when its client is forgotten.
func (s *spokeLoops) runSpoke(ctx context.Context, name string) {
	metrics.SpokeLoops.WithLabelValues(name).Set(1)
	defer metrics.SpokeLoops.WithLabelValues(name).Set(0)
	for {
		c, ok := s.clients.Get(name)
		if !ok {
			return
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := s.rec.RunCluster(rctx, c); err != nil && !errors.Is(err, context.Canceled) {
				s.log.Error("cluster loops ended", "cluster", name, "error", err)
			}
		}()
		next := s.follow(rctx, name, c)
		cancel()
		<-done
		switch next {
		case spokeStop:
			return
		case spokeDrained:
			s.clients.Forget(name)
			s.forgotten()
			s.log.Info("cluster drained and forgotten", "cluster", name)
			return
		}
		s.log.Info("cluster changed: moving its loops to the new client", "cluster", name)
	}
}

// followerDrainPoll is how often a replica asks the store whether the
// drain of a removed spoke that runs elsewhere has ended.
const followerDrainPoll = 2 * time.Second

// startForgetting runs forgetDrained until ctx ends or stop is called;
// stop waits for it to return, and may be called more than once.
func (s *spokeLoops) startForgetting(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.forgetDrained(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// forgetDrained is the part of a removed spoke's drain on a replica that
// does not run that spoke's loops (a single_leader follower, or with
// sharding a replica not holding the spoke's Lease). No drain ends there,
// yet it serves the API and the drop-box: without this it would list the
// spoke as draining, and accept its pods' uploads, until it restarted. It
// forgets the spoke once the store holds no live row of it, which is how
// the drain where the loops run ends (its pods ended, or were marked lost
// past the drain timeout). It only reads: ending rows is that replica's.
func (s *spokeLoops) forgetDrained(ctx context.Context) {
	t := time.NewTicker(followerDrainPoll)
	defer t.Stop()
	for {
		changes := s.changes()
		for _, c := range s.clients.All() {
			name := c.Entry.Name
			if !s.clients.Draining(name) {
				continue
			}
			rows, err := s.rec.Store.ListWorkPods(ctx, store.Filter{Cluster: name, States: store.LiveStates, WithoutSpec: true, Limit: 1})
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				s.log.Warn("cannot ask the store whether a removed cluster's drain ended; asking again", "cluster", name, "error", err)
			case len(rows) == 0:
				// Forget does nothing if a reload listed the spoke again
				// since Draining said yes.
				s.clients.Forget(name)
				s.forgotten()
				s.log.Info("cluster drained where its loops ran, and forgotten", "cluster", name)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-changes:
		}
	}
}

// spokeNext is what follow saw end a spoke's loops.
type spokeNext int

const (
	spokeStop    spokeNext = iota // ctx ended
	spokeMoved                    // a new client
	spokeDrained                  // removed, and its rows ended
)

// follow waits while spoke name's loops run on client c: for ctx's end, a
// new client, or, once the spoke is removed, the end of its drain.
func (s *spokeLoops) follow(ctx context.Context, name string, c *fleet.Client) spokeNext {
	var drained chan struct{}
	defer func() {
		if drained != nil {
			metrics.ClustersDraining.Dec()
		}
	}()
	for {
		changes := s.changes()
		if now, ok := s.clients.Get(name); ok && now != c {
			return spokeMoved
		}
		if drained == nil && s.clients.Draining(name) {
			drained = make(chan struct{})
			metrics.ClustersDraining.Inc()
			s.log.Info("cluster removed from the profile: draining (no new dispatch; live pods followed to their end)", "cluster", name, "drain_timeout", s.drainTimeout)
			go func() {
				lost, err := s.rec.Drain(ctx, name, s.drainTimeout)
				if err != nil {
					return // ctx ended: a new client (listed again) or the end
				}
				if lost > 0 {
					s.log.Warn("drain timeout passed: live pods marked lost", "cluster", name, "lost", lost)
				}
				close(drained)
			}()
		}
		select {
		case <-ctx.Done():
			return spokeStop
		case <-changes:
		case <-drained:
			return spokeDrained
		}
	}
}

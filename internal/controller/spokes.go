package controller

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"crucible.dev/crucible/internal/fleet"
	"crucible.dev/crucible/internal/metrics"
	"crucible.dev/crucible/internal/reconcile"
)

// spokeLoops runs each spoke's reconcile loops (reconcile.RunCluster) and
// keeps them in step with the fleet as reloads change it: a spoke added
// gets its loops, a changed one has its old loops ended and new ones
// started on its new client, and a removed one keeps its loops while it
// drains, then they end and its client is forgotten.
type spokeLoops struct {
	rec          *reconcile.Reconciler
	clients      *fleet.Clients
	drainTimeout time.Duration
	// forgotten is told when a drained spoke's client is dropped (the
	// drop-box then stops validating its pods).
	forgotten func()
	log       *slog.Logger

	changed chan struct{} // the fleet changed: sync
}

func newSpokeLoops(rec *reconcile.Reconciler, clients *fleet.Clients, drainTimeout time.Duration, forgotten func(), log *slog.Logger) *spokeLoops {
	return &spokeLoops{rec: rec, clients: clients, drainTimeout: drainTimeout, forgotten: forgotten, log: log, changed: make(chan struct{}, 1)}
}

// fleetChanged asks a running run to sync with the clients; it never
// blocks (a sync pending already covers this change too).
func (s *spokeLoops) fleetChanged() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// spokeRun is one spoke's loops: on client, until ctx is cancelled; done
// closes once RunCluster has returned. A drain runs under ctx too, so a
// spoke listed again (a new client, new loops) stops its old drain.
type spokeRun struct {
	client   *fleet.Client
	ctx      context.Context
	cancel   context.CancelFunc
	done     chan struct{}
	draining bool
}

// run runs every spoke's loops until ctx ends, then waits for them.
func (s *spokeLoops) run(ctx context.Context) error {
	runs := map[string]*spokeRun{}
	drained := make(chan string)
	defer func() {
		for _, r := range runs {
			r.cancel()
		}
		for _, r := range runs {
			<-r.done
		}
		metrics.ClustersDraining.Set(0)
	}()
	for {
		s.sync(ctx, runs, drained)
		select {
		case <-ctx.Done():
			return nil
		case <-s.changed:
		case name := <-drained:
			if r, ok := runs[name]; ok && r.draining {
				r.cancel()
				<-r.done
				delete(runs, name)
				s.clients.Forget(name)
				s.forgotten()
				s.log.Info("cluster drained and forgotten", "cluster", name)
			}
		}
	}
}

// sync starts, restarts and drains loops until runs matches the clients.
func (s *spokeLoops) sync(ctx context.Context, runs map[string]*spokeRun, drained chan<- string) {
	listed := map[string]bool{}
	draining := 0
	for _, c := range s.clients.All() {
		name := c.Entry.Name
		listed[name] = true
		r, ok := runs[name]
		if ok && r.client != c {
			s.log.Info("cluster changed: moving its loops to the new client", "cluster", name)
			r.cancel()
			<-r.done
			ok = false
		}
		if !ok {
			r = s.start(ctx, c)
			runs[name] = r
		}
		if s.clients.Draining(name) {
			draining++
			if !r.draining {
				r.draining = true
				s.drain(r.ctx, name, drained)
			}
		}
	}
	for name, r := range runs {
		if !listed[name] {
			r.cancel()
			<-r.done
			delete(runs, name)
		}
	}
	metrics.ClustersDraining.Set(float64(draining))
}

// start runs c's loops in a goroutine of their own.
func (s *spokeLoops) start(ctx context.Context, c *fleet.Client) *spokeRun {
	rctx, cancel := context.WithCancel(ctx)
	r := &spokeRun{client: c, ctx: rctx, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		if err := s.rec.RunCluster(rctx, c); err != nil && !errors.Is(err, context.Canceled) {
			s.log.Error("cluster loops ended", "cluster", c.Entry.Name, "error", err)
		}
	}()
	return r
}

// drain follows a removed cluster's live rows to their end (or the drain
// timeout), then reports it on drained; ctx is the cluster's run's.
func (s *spokeLoops) drain(ctx context.Context, name string, drained chan<- string) {
	s.log.Info("cluster removed from the profile: draining (no new dispatch; live pods followed to their end)", "cluster", name, "drain_timeout", s.drainTimeout)
	go func() {
		lost, err := s.rec.Drain(ctx, name, s.drainTimeout)
		if err != nil {
			return // ctx ended: so does run, which ends the loops
		}
		if lost > 0 {
			s.log.Warn("drain timeout passed: live pods marked lost", "cluster", name, "lost", lost)
		}
		select {
		case drained <- name:
		case <-ctx.Done():
		}
	}()
}

package shard

import (
	"context"
	"errors"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// hold runs one spoke from the acquiring write (lease, sent when) until the
// run has returned and the lease is released. It renews every RetryPeriod,
// also while the run winds down, so that nobody takes the spoke before the
// run is over. A watchdog cancels the run RenewDeadline after the last
// successful renewal was sent, even while a renewal hangs; by then the
// lease has at least LeaseDuration-RenewDeadline left in anyone's eyes.
func (a *Assigner) hold(ctx context.Context, h *holding, lease *coordinationv1.Lease, sent time.Time, run func(context.Context, string, int64)) {
	defer a.drop(h)
	parent := context.WithoutCancel(ctx) // the lease outlives the run
	done := make(chan struct{})
	if time.Since(sent) >= a.o.RenewDeadline {
		// Won too slowly to prove the lease still ours: hand it on unused.
		a.lapse(h, "the acquiring write took longer than the renew deadline")
		close(done)
	} else {
		go func() {
			defer close(done)
			run(ctx, h.spoke, h.epoch)
		}()
	}
	watchdog := time.AfterFunc(time.Until(sent.Add(a.o.RenewDeadline)), func() {
		a.lapse(h, "no renewal succeeded within the renew deadline")
	})
	defer watchdog.Stop()
	tick := time.NewTicker(a.o.RetryPeriod)
	defer tick.Stop()
	taken := false
	for {
		select {
		case <-done:
			a.giveUp(h.spoke, "its run returned by itself") // a no-op if it was told to stop
			if !taken {
				a.releaseAfterRun(parent, h, lease)
			}
			return
		case <-tick.C:
		}
		if taken || closed(done) { // a run that has returned is released, not renewed
			continue
		}
		rctx, cancel := context.WithTimeout(parent, a.o.RenewDeadline)
		l, at, err := a.renew(rctx, h.epoch, lease)
		cancel()
		switch {
		case err == nil:
			lease = l
			// A watchdog that fired has stopped the run for good; a renewal
			// after it only keeps the spoke until the run has returned.
			if watchdog.Stop() {
				watchdog.Reset(time.Until(at.Add(a.o.RenewDeadline)))
			}
		case errors.Is(err, errTaken):
			taken = true
			a.lapse(h, "the lease was taken")
			a.o.Log.Warn("spoke lease taken by another replica", "spoke", h.spoke, "epoch", h.epoch, "err", err)
		default:
			a.o.Log.Debug("could not renew a spoke lease", "spoke", h.spoke, "epoch", h.epoch, "err", err)
		}
	}
}

// lapse stops the run of h because this replica can no longer prove it
// holds the lease.
func (a *Assigner) lapse(h *holding, why string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if h.leaving() {
		return
	}
	h.stop()
	a.o.Log.Warn("stopping a spoke's loops: lease not provably held", "spoke", h.spoke, "epoch", h.epoch, "reason", why)
}

// releaseAfterRun clears the holder so that the next replica need not wait
// out the lease. It fails harmlessly when the lease has moved on.
func (a *Assigner) releaseAfterRun(ctx context.Context, h *holding, lease *coordinationv1.Lease) {
	rctx, cancel := context.WithTimeout(ctx, a.o.RenewDeadline)
	defer cancel()
	switch err := a.release(rctx, h.epoch, lease); {
	case err == nil:
		a.o.Log.Info("released a spoke", "spoke", h.spoke, "epoch", h.epoch)
	case errors.Is(err, errTaken):
		a.o.Log.Info("spoke lease already taken on release", "spoke", h.spoke, "epoch", h.epoch, "err", err)
	default:
		a.o.Log.Warn("could not release a spoke lease; it expires by itself", "spoke", h.spoke, "epoch", h.epoch, "err", err)
	}
}

// drop forgets h once its lease is released (or lost).
func (a *Assigner) drop(h *holding) {
	h.stop() // frees the run's context
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.held[h.spoke] == h {
		delete(a.held, h.spoke)
	}
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

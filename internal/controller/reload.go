package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"crucible.dev/crucible/internal/fleet"
	"crucible.dev/crucible/internal/metrics"
	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/reload"
)

// ProfileSource is where a running controller reloads its profile from:
// Path, read by Load (the command's own, which applies its flags the same
// way as at start, so a flag is no change).
type ProfileSource struct {
	Path string
	Load func(path string) (*profile.Profile, error)
	// Every is how often the file is checked for a change; SIGHUP reloads
	// at once. Zero: every 2 s, soon after a ConfigMap's update reaches the
	// pod's volume (which itself takes up to a minute).
	Every time.Duration
}

const profileCheckEvery = 2 * time.Second

// reloader reloads the profile when its file's content changes or on
// SIGHUP (reload.Watcher). A file that does not parse, or changes a key
// only a restart applies, is refused (logged with why, counted) and the
// running controller keeps everything as it was; asking again with the
// same file (SIGHUP) tries again.
type reloader struct {
	src *ProfileSource
	c   *parts
	log *slog.Logger
}

func (r reloader) Start(ctx context.Context) error {
	every := r.src.Every
	if every <= 0 {
		every = profileCheckEvery
	}
	w := &reload.Watcher{
		Component: "controller",
		Path:      r.src.Path,
		Interval:  every,
		MaxBytes:  profile.MaxProfileBytes,
		Apply:     r.apply,
		Report:    r.report,
	}
	return w.Start(ctx)
}

// apply loads the profile and applies it. It loads from the path, not
// from the watcher's bytes: Load applies the command's flags as at start.
func (r reloader) apply(ctx context.Context, _ []byte) (bool, error) {
	next, err := r.src.Load(r.src.Path)
	if err != nil {
		return false, err
	}
	ch, err := r.c.reloadFile(ctx, next)
	switch {
	case err != nil:
		return false, err
	case ch.Empty():
		r.log.Info("profile reloaded: the fleet is unchanged", "path", r.src.Path)
		return false, nil
	}
	r.log.Info("profile reloaded", "path", r.src.Path, "added", ch.Added, "changed", ch.Changed, "removed", ch.Removed, "returned", ch.Returned)
	return true, nil
}

// report counts every outcome in crucible_profile_reloads_total too, and
// logs a refusal with why.
func (r reloader) report(o reload.Outcome, err error) {
	metrics.ProfileReloads.WithLabelValues(string(o)).Inc()
	var restart *restartNeededError
	switch {
	case errors.As(err, &restart):
		r.log.Error("profile reload refused: the running process keeps its settings", "path", r.src.Path, "error", err, "keys", restart.keys)
	case err != nil:
		r.log.Error("profile reload refused: the running fleet is unchanged", "path", r.src.Path, "error", err)
	}
}

// restartNeededError refuses a profile that changes what only a restart
// applies.
type restartNeededError struct{ keys []string }

// Unwrap makes the refusal count as reload.RestartNeeded.
func (e *restartNeededError) Unwrap() error { return reload.ErrRestartNeeded }

func (e *restartNeededError) Error() string {
	return "restart needed for " + strings.Join(e.keys, ", ") + " (a reload applies only [[clusters]], default_cluster and [[pods.classes]])"
}

// reload applies next, a validated profile, to the running controller, or
// nothing of it: what only a restart applies must be unchanged, and every
// new spoke client must build (Clients.Update). Then the profile the API
// reads, the drop-box's validators and the spokes' loops move to it, and
// new clients are probed at once rather than at the next health round.
func (c *parts) reload(ctx context.Context, next *profile.Profile) (fleet.Changes, error) {
	if keys := profile.RestartNeeded(c.p, next); len(keys) > 0 {
		return fleet.Changes{}, &restartNeededError{keys: keys}
	}
	var opts []fleet.Option
	if !c.requestTokens {
		var err error
		if opts, err = clientOptions(next, c.hubCfg, c.hubToken, c.log.With("component", "fleet")); err != nil {
			return fleet.Changes{}, err
		}
	}
	ch, err := c.clients.Update(next.Clusters, opts...)
	if err != nil {
		return fleet.Changes{}, fmt.Errorf("clusters: %w", err)
	}
	c.requestTokens = c.requestTokens || len(opts) > 0
	c.current.Store(next)
	c.syncDropBox()
	c.spokes.fleetChanged()
	c.capacity.Sync(capacitySpokes(c.clients))
	for _, name := range slices.Concat(ch.Added, ch.Changed, ch.Returned) {
		if client, ok := c.clients.Get(name); ok {
			go func() {
				pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				client.Probe(pctx)
			}()
		}
	}
	return ch, nil
}

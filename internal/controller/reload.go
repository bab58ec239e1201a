package controller

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"crucible.dev/crucible/internal/fleet"
	"crucible.dev/crucible/internal/metrics"
	"crucible.dev/crucible/internal/profile"
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
// SIGHUP. A file that does not parse, or changes a key only a restart
// applies, is refused (logged with why, counted) and the running
// controller keeps everything as it was; asking again with the same file
// (SIGHUP) tries again.
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
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	last, _ := digest(r.src.Path) // the file the process started with
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		forced := false
		select {
		case <-ctx.Done():
			return nil
		case <-hup:
			forced = true
		case <-t.C:
		}
		sum, err := digest(r.src.Path)
		if err != nil {
			if forced {
				metrics.ProfileReloads.WithLabelValues("invalid").Inc()
				r.log.Error("profile reload refused: the running fleet is unchanged", "path", r.src.Path, "error", err)
			}
			continue // a ConfigMap volume swaps its files: gone for a moment
		}
		if !forced && bytes.Equal(sum, last) {
			continue
		}
		last = sum
		r.reload(ctx)
	}
}

// reload loads the file and applies it, logging and counting the outcome.
func (r reloader) reload(ctx context.Context) {
	next, err := r.src.Load(r.src.Path)
	if err != nil {
		metrics.ProfileReloads.WithLabelValues("invalid").Inc()
		r.log.Error("profile reload refused: the running fleet is unchanged", "path", r.src.Path, "error", err)
		return
	}
	ch, err := r.c.reload(ctx, next)
	var restart *restartNeededError
	switch {
	case errors.As(err, &restart):
		metrics.ProfileReloads.WithLabelValues("restart_needed").Inc()
		r.log.Error("profile reload refused: the running process keeps its settings", "path", r.src.Path, "error", err, "keys", restart.keys)
	case err != nil:
		metrics.ProfileReloads.WithLabelValues("invalid").Inc()
		r.log.Error("profile reload refused: the running fleet is unchanged", "path", r.src.Path, "error", err)
	case ch.Empty():
		metrics.ProfileReloads.WithLabelValues("unchanged").Inc()
		r.log.Info("profile reloaded: the fleet is unchanged", "path", r.src.Path)
	default:
		metrics.ProfileReloads.WithLabelValues("applied").Inc()
		r.log.Info("profile reloaded", "path", r.src.Path, "added", ch.Added, "changed", ch.Changed, "removed", ch.Removed, "returned", ch.Returned)
	}
}

// digest is the SHA-256 of the file at path.
func digest(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	return sum[:], nil
}

// restartNeededError refuses a profile that changes what only a restart
// applies.
type restartNeededError struct{ keys []string }

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

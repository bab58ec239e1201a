package webhook

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"os"
	"time"

	"crucible.dev/crucible/internal/metrics"
)

// DefaultReloadInterval is how often a Reloader checks its file by default.
const DefaultReloadInterval = 5 * time.Second

// Reloader keeps a Server's configuration in step with a file. It polls
// instead of watching: a stat every Interval, and a read and hash only when
// the size or modification time moved, which also catches ConfigMap volumes
// (a symlink swap changes what Stat sees). A changed file that fails to load
// is logged and counted, and the previous configuration keeps serving.
type Reloader struct {
	// Path is the configuration file the Server was built from.
	Path string
	// Interval between checks; DefaultReloadInterval when zero.
	Interval time.Duration
	// Server receives each new configuration.
	Server *Server
	// Logger defaults to slog.Default().
	Logger *slog.Logger

	lastStat   fileStat
	lastFailed [sha256.Size]byte // digest of the last content that failed, not retried
}

// fileStat is what a poll compares without reading the file.
type fileStat struct {
	size    int64
	modTime time.Time
}

// Start fetches every provider's keys, then checks the file every Interval
// until ctx ends. It returns nil when ctx ends.
func (r *Reloader) Start(ctx context.Context) error {
	if r.Server == nil {
		return fmt.Errorf("reloader for %s has no server", r.Path)
	}
	interval := r.Interval
	if interval <= 0 {
		interval = DefaultReloadInterval
	}
	metrics.WebhookConfigLastReloadSuccess.Set(1) // the Server was built from a good config
	r.Server.warm(ctx)

	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
			r.Check(ctx)
		}
	}
}

// Check loads the file if it changed since the configuration being served
// and applies it. Start calls it every Interval; tests call it directly.
func (r *Reloader) Check(ctx context.Context) {
	log := r.Logger
	if log == nil {
		log = slog.Default()
	}
	fi, err := os.Stat(r.Path)
	if err != nil {
		r.failOnce(log, fmt.Errorf("stat: %w", err))
		return
	}
	st := fileStat{size: fi.Size(), modTime: fi.ModTime()}
	if st == r.lastStat {
		return
	}
	data, err := readConfigFile(r.Path)
	if err != nil {
		r.failOnce(log, err)
		return
	}
	r.lastStat = st
	digest := sha256.Sum256(data)
	switch digest {
	case r.Server.Config().digest: // back to what is served, or touched only
		r.lastFailed = [sha256.Size]byte{}
		metrics.WebhookConfigLastReloadSuccess.Set(1)
		return
	case r.lastFailed:
		return
	}
	if err := r.apply(ctx, data); err != nil {
		r.fail(log, err, digest)
		return
	}
	r.lastFailed = [sha256.Size]byte{}
	metrics.WebhookConfigLastReloadSuccess.Set(1)
	log.Info("reloaded authn webhook config", "path", r.Path, "providers", len(r.Server.Config().Providers))
	r.Server.warm(ctx)
}

func (r *Reloader) apply(ctx context.Context, data []byte) error {
	cfg, err := ParseConfig(data)
	if err != nil {
		return err
	}
	return r.Server.Apply(ctx, cfg)
}

// fail records a failed load. digest stops the same broken content from
// being retried and logged on every poll.
func (r *Reloader) fail(log *slog.Logger, err error, digest [sha256.Size]byte) {
	r.lastFailed = digest
	metrics.WebhookConfigReloadFailures.Inc()
	metrics.WebhookConfigLastReloadSuccess.Set(0)
	log.Error("authn webhook config not reloaded; the previous one keeps serving", "path", r.Path, "error", err)
}

// failOnce records a file that cannot be read, once until it changes.
func (r *Reloader) failOnce(log *slog.Logger, err error) {
	if r.lastStat == unreadable {
		return
	}
	r.lastStat = unreadable
	r.fail(log, err, [sha256.Size]byte{})
}

// unreadable is lastStat while the file cannot be stat'ed or read.
var unreadable = fileStat{size: -1}

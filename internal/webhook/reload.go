package webhook

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"time"

	"crucible.dev/crucible/internal/metrics"
	"crucible.dev/crucible/internal/reload"
)

// DefaultReloadInterval is how often a Reloader checks its file by default.
const DefaultReloadInterval = 5 * time.Second

// Reloader keeps a Server's configuration in step with a file, as the
// controller follows its profile (reload.Watcher): a stat every Interval, a
// read and hash only when it moved, and at once on SIGHUP. A changed file
// that fails to load is logged and counted, and the previous configuration
// keeps serving.
type Reloader struct {
	// Path is the configuration file the Server was built from.
	Path string
	// Interval between checks; DefaultReloadInterval when zero.
	Interval time.Duration
	// Server receives each new configuration.
	Server *Server
	// Logger defaults to slog.Default().
	Logger *slog.Logger

	w *reload.Watcher
}

// Start fetches every provider's keys, then follows the file until ctx
// ends. It returns nil when ctx ends.
func (r *Reloader) Start(ctx context.Context) error {
	if r.Server == nil {
		return fmt.Errorf("reloader for %s has no server", r.Path)
	}
	metrics.WebhookConfigLastReloadSuccess.Set(1) // the Server was built from a good config
	r.Server.warm(ctx)
	return r.watcher().Start(ctx)
}

// Check loads the file if it changed since the configuration being served
// and applies it. Start checks every Interval; tests call it directly.
func (r *Reloader) Check(ctx context.Context) { r.watcher().Check(ctx) }

func (r *Reloader) watcher() *reload.Watcher {
	if r.w == nil {
		interval := r.Interval
		if interval <= 0 {
			interval = DefaultReloadInterval
		}
		r.w = &reload.Watcher{
			Component: "webhook",
			Path:      r.Path,
			Interval:  interval,
			MaxBytes:  MaxConfigBytes,
			Apply:     r.apply,
			Report:    r.report,
			Current:   r.Server.Config().digest,
		}
	}
	return r.w
}

// apply serves data's configuration unless it is the one served already
// (the file back to it after a refused change).
func (r *Reloader) apply(ctx context.Context, data []byte) (bool, error) {
	if sha256.Sum256(data) == r.Server.Config().digest {
		return false, nil
	}
	cfg, err := ParseConfig(data)
	if err != nil {
		return false, err
	}
	if err := r.Server.Apply(ctx, cfg); err != nil {
		return false, err
	}
	r.log().Info("reloaded authn webhook config", "path", r.Path, "providers", len(r.Server.Config().Providers))
	r.Server.warm(ctx)
	return true, nil
}

// report keeps the webhook's own reload metrics in step and logs a
// refusal.
func (r *Reloader) report(_ reload.Outcome, err error) {
	if err == nil {
		metrics.WebhookConfigLastReloadSuccess.Set(1)
		return
	}
	metrics.WebhookConfigReloadFailures.Inc()
	metrics.WebhookConfigLastReloadSuccess.Set(0)
	r.log().Error("authn webhook config not reloaded; the previous one keeps serving", "path", r.Path, "error", err)
}

func (r *Reloader) log() *slog.Logger {
	if r.Logger == nil {
		return slog.Default()
	}
	return r.Logger
}

package reload

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"crucible.dev/crucible/internal/metrics"
)

// Outcome is what came of a reload, the outcome label of
// crucible_config_reloads_total.
type Outcome string

// Outcomes of a reload. Anything but Applied and Unchanged left the running
// process as it was.
const (
	Applied       Outcome = "applied"        // the new content is in force
	Unchanged     Outcome = "unchanged"      // it is what was in force already
	Invalid       Outcome = "invalid"        // unreadable, or refused by Apply
	RestartNeeded Outcome = "restart_needed" // it changes what only a restart applies
)

// ErrRestartNeeded is wrapped by an Apply error refusing content that only
// a restart could apply; the reload counts as RestartNeeded, not Invalid.
var ErrRestartNeeded = errors.New("restart needed")

// Watcher follows a configuration file: every Interval it stats the file,
// and reads and hashes it only when the stat moved; content that differs
// from the last it handed to Apply is applied. SIGHUP (or a value on
// Signals) reads and applies the file whatever it holds, so asking again
// retries a refused file. A file that cannot be read is reported once until
// it can; a refusal leaves the running process as it was.
type Watcher struct {
	// Component names the process in the metric and the log: "controller",
	// "webhook".
	Component string
	// Path is the file the process was started from.
	Path string
	// Interval between polls; must be positive.
	Interval time.Duration
	// MaxBytes bounds the read (ReadFile); Apply sees at most one byte
	// more, and refuses that as too large.
	MaxBytes int64
	// Apply applies the file's content: changed false when it is what the
	// process runs already. Its log lines on success are its own.
	Apply func(ctx context.Context, data []byte) (changed bool, err error)
	// Report, if set, hears every outcome once it is counted, with the
	// error for Invalid and RestartNeeded: the component logs refusals and
	// keeps its older metrics there.
	Report func(o Outcome, err error)
	// Current is the SHA-256 of the content the process runs; zero: what
	// the file holds when Start begins.
	Current [sha256.Size]byte
	// Signals forces a reload on each value; nil: SIGHUP to this process.
	Signals <-chan os.Signal

	stat       FileStat // of the content last read; zero forces a read
	unreadable bool     // the last read failed and was reported
}

// Start polls until ctx ends, reloading at once on SIGHUP. It returns nil
// when ctx ends.
func (w *Watcher) Start(ctx context.Context) error {
	if w.Interval <= 0 || w.Apply == nil {
		return fmt.Errorf("reload watcher for %s: no interval or no Apply", w.Path)
	}
	hup := w.Signals
	if hup == nil {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGHUP)
		defer signal.Stop(ch)
		hup = ch
	}
	if w.Current == ([sha256.Size]byte{}) {
		if data, err := ReadFile(w.Path, w.MaxBytes); err == nil {
			w.Current = sha256.Sum256(data)
		}
	}
	t := time.NewTicker(w.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-hup:
			w.check(ctx, true)
		case <-t.C:
			w.check(ctx, false)
		}
	}
}

// Check applies the file if it changed since the last check, as a poll
// does. Start calls it every Interval; tests call it directly.
func (w *Watcher) Check(ctx context.Context) { w.check(ctx, false) }

// check reads the file when its stat moved, or always when forced, and
// applies content that differs from Current, or any when forced.
func (w *Watcher) check(ctx context.Context, forced bool) {
	st, err := Stat(w.Path)
	if err == nil && st == w.stat && !forced {
		return
	}
	var data []byte
	if err == nil {
		data, err = ReadFile(w.Path, w.MaxBytes)
	}
	if err != nil {
		w.stat = FileStat{} // read again as soon as it is back
		if forced || !w.unreadable {
			w.unreadable = true
			w.report(Invalid, err)
		}
		return
	}
	w.stat, w.unreadable = st, false
	sum := sha256.Sum256(data)
	if sum == w.Current && !forced {
		return
	}
	w.Current = sum // refused content is not retried until it changes or SIGHUP
	changed, err := w.Apply(ctx, data)
	switch {
	case errors.Is(err, ErrRestartNeeded):
		w.report(RestartNeeded, err)
	case err != nil:
		w.report(Invalid, err)
	case changed:
		w.report(Applied, nil)
	default:
		w.report(Unchanged, nil)
	}
}

func (w *Watcher) report(o Outcome, err error) {
	metrics.ConfigReloads.WithLabelValues(w.Component, string(o)).Inc()
	if w.Report != nil {
		w.Report(o, err)
		return
	}
	if err != nil {
		slog.Error("configuration reload refused: the running process is unchanged", "component", w.Component, "path", w.Path, "error", err)
	}
}

package reconcile

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"crucible.dev/crucible/internal/metrics"
	"crucible.dev/crucible/internal/retry"
)

// rewatch is the reconnect backoff of a cluster's pod watch. client-go's
// reflector waits between failed attempts with a delay that doubles from
// 0.8 s to 30 s, jittered up to 60 s, and resets only after two minutes
// without a failure: once a spoke's API server had restarted two or three
// times in a few minutes, its pods' watch resumed up to a minute after the
// server was back, and the rows — a live log's end event, a push waiting for
// its pod's uid — waited with it. rewatch retries a list or watch that failed
// transiently inside the call, after delays doubling from Initial to Max,
// and starts again from Initial once a watch is established; the reflector
// sees only the errors that are answers (410 Gone among them: that one needs
// its relist).
type rewatch struct {
	Cluster      string
	Initial, Max time.Duration
	// Server is the cluster's REST client, asked whether a 403 came from
	// an API server still starting (retry.NotReady).
	Server rest.Interface
	// OnRetry, when set, is told of every retry before its wait: the
	// attempt that failed (from 1 since the last established watch) and
	// the delay chosen. Tests read the watch's behaviour from it.
	OnRetry func(attempt int, delay time.Duration)
	Log     *slog.Logger

	failures int // consecutive failed attempts; the reflector calls one at a time
}

// Reconnect delays of a pod watch: a spoke that is back is watched again
// within reconnectMax (jittered), whatever it went through before.
const (
	reconnectInitial = 250 * time.Millisecond
	reconnectMax     = 4 * time.Second
)

// list lists through fn, retrying transient failures.
func (w *rewatch) list(ctx context.Context, fn func(context.Context) (runtime.Object, error)) (runtime.Object, error) {
	for {
		obj, err := fn(ctx)
		if err == nil || !w.wait(ctx, err) {
			return obj, err
		}
	}
}

// watch opens a watch through fn, retrying transient failures; an
// established watch resets the backoff.
func (w *rewatch) watch(ctx context.Context, fn func(context.Context) (watch.Interface, error)) (watch.Interface, error) {
	for {
		wi, err := fn(ctx)
		if err == nil {
			if w.failures > 0 {
				w.Log.Info("pod watch reconnected", "cluster", w.Cluster, "failed_attempts", w.failures)
			}
			w.failures = 0
			return wi, nil
		}
		if !w.wait(ctx, err) {
			return nil, err
		}
	}
}

// wait sleeps before the next attempt after err and reports whether there
// is one: not for an answer, a 410 (the reflector relists) or an ended ctx.
func (w *rewatch) wait(ctx context.Context, err error) bool {
	if apierrors.IsGone(err) || apierrors.IsResourceExpired(err) || !retry.IsTransient(retry.NotReady(ctx, w.Server, err)) {
		return false
	}
	w.failures++
	delay := w.delay()
	if w.failures == 1 {
		w.Log.Warn("watch pods failed; reconnecting", "cluster", w.Cluster, "error", err)
	}
	metrics.WatchReconnects.WithLabelValues(w.Cluster).Inc()
	if w.OnRetry != nil {
		w.OnRetry(w.failures, delay)
	}
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// delay is the wait after the current run of failures: Initial doubled per
// failure, capped at Max, less up to a quarter of jitter so the clusters of
// a restarted hub do not reconnect in step.
func (w *rewatch) delay() time.Duration {
	d := w.Initial
	for i := 1; i < w.failures && d < w.Max; i++ {
		d *= 2
	}
	d = min(d, w.Max)
	return d - time.Duration(rand.Int64N(int64(d)/4+1))
}

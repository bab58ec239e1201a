// Package retry owns crucible's transient-error policy (R-C4): which errors of
// a spoke API are worth retrying — network errors, timeouts, 429, 5xx, watch
// expiry — and which are answers (400/403/404/409/422; a 403 from an API
// server that is not ready excepted, see NotReady), and a bounded,
// jittered exponential backoff for the former. Await, reconcile, the sweep and
// dispatch all use it, so a blip neither aborts a live run nor reaps a pod.
package retry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"

	"crucible.dev/crucible/internal/metrics"
)

// IsTransient reports whether err may go away by itself. Unknown errors are
// treated as permanent: retrying a mistake only delays its report.
func IsTransient(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.Canceled) {
		return false
	}
	if _, ok := errors.AsType[transientError](err); ok {
		return true
	}
	if p, ok := errors.AsType[permanent](err); ok && p.Permanent() {
		return false
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		code := status.Status().Code
		switch {
		case apierrors.IsTooManyRequests(err), apierrors.IsServerTimeout(err), apierrors.IsTimeout(err),
			apierrors.IsServiceUnavailable(err), apierrors.IsInternalError(err),
			apierrors.IsResourceExpired(err), apierrors.IsGone(err), apierrors.IsUnexpectedServerError(err):
			return true
		case code >= 500:
			return true
		case code == 401:
			// A rotated token file is re-read after a 401: the next call
			// carries the new token.
			return true
		}
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true
	}
	var opErr *net.OpError
	return errors.As(err, &opErr)
}

// permanent is an error that says it is an answer, whatever it wraps or is
// wrapped in (a redirect a client refused arrives inside a *url.Error,
// which is a net.Error).
type permanent interface {
	error
	Permanent() bool
}

// Policy bounds retries: exponential backoff from Initial, capped at Max,
// with full jitter, for at most Budget in total. It has no default: the
// controller's comes from the profile's [reconcile] section (retry_initial,
// max_backoff, retry_budget), applied in package fleet.
type Policy struct {
	Initial, Max, Budget time.Duration
}

// transientError marks an error that IsTransient would call an answer as
// one that may go away by itself (NotReady).
type transientError struct{ err error }

func (e transientError) Error() string { return e.err.Error() }
func (e transientError) Unwrap() error { return e.err }

// NotReady returns err marked transient when it is a 403 from an API server
// that says it is not ready, and err as it is otherwise. A kube-apiserver
// that has just started serves requests before its RBAC authorizer and
// admission plugins have loaded, and denies them meanwhile ("cannot create
// pods", "not yet ready to handle request" — seen by make chaos across a
// spoke's restart); a load balancer in front of it would not have sent them
// there. Asking its /readyz (open to every caller) tells that apart from a
// real RBAC gap, which a ready server answers and which is reported at once.
func NotReady(ctx context.Context, server rest.Interface, err error) error {
	if !apierrors.IsForbidden(err) || server == nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if rerr := server.Get().AbsPath("/readyz").Do(rctx).Error(); rerr != nil {
		return transientError{err}
	}
	return err
}

// ErrBudgetExhausted wraps the last transient error once the budget is spent.
var ErrBudgetExhausted = errors.New("retry budget exhausted")

// Do calls fn until it succeeds, fails permanently, ctx ends or the budget is
// spent. op names the operation in metrics and errors.
func Do(ctx context.Context, p Policy, op string, fn func(context.Context) error) error {
	deadline := time.Now().Add(p.Budget)
	wait := p.Initial
	for attempt := 1; ; attempt++ {
		err := fn(ctx)
		if err == nil {
			return nil
		}
		if !IsTransient(err) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %w after %d attempts: %w", op, ErrBudgetExhausted, attempt, err)
		}
		metrics.TransientRetries.WithLabelValues(op).Inc()
		sleep := time.Duration(rand.Int64N(int64(wait) + 1)) // full jitter
		if remaining := time.Until(deadline); sleep > remaining {
			sleep = remaining
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (last error: %w)", op, ctx.Err(), err)
		case <-time.After(sleep):
		}
		wait = min(wait*2, p.Max)
	}
}

package retry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestIsTransient(t *testing.T) {
	gr := schema.GroupResource{Resource: "pods"}
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"connection refused", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, true},
		{"connection reset, wrapped", fmt.Errorf("get pods: %w", syscall.ECONNRESET), true},
		{"unexpected EOF", io.ErrUnexpectedEOF, true},
		{"deadline", context.DeadlineExceeded, true},
		{"cancelled", context.Canceled, false},
		{"429", apierrors.NewTooManyRequests("slow down", 1), true},
		{"500", apierrors.NewInternalError(errors.New("boom")), true},
		{"503", apierrors.NewServiceUnavailable("later"), true},
		{"504", apierrors.NewTimeoutError("slow", 1), true},
		{"server timeout", apierrors.NewServerTimeout(gr, "list", 1), true},
		{"watch expired (410)", apierrors.NewResourceExpired("too old"), true},
		{"401 (token rotated)", apierrors.NewUnauthorized("expired token"), true},
		{"400", apierrors.NewBadRequest("no"), false},
		{"403", apierrors.NewForbidden(gr, "x", errors.New("rbac")), false},
		{"404", apierrors.NewNotFound(gr, "x"), false},
		{"409", apierrors.NewAlreadyExists(gr, "x"), false},
		{"422", apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "x", nil), false},
		{"unknown error", errors.New("mystery"), false},
	}
	for _, tc := range cases {
		if got := IsTransient(tc.err); got != tc.want {
			t.Errorf("%s: IsTransient = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestDoRetriesTransientUntilSuccess(t *testing.T) {
	calls := 0
	err := Do(t.Context(), Policy{Initial: time.Millisecond, Max: 2 * time.Millisecond, Budget: time.Second}, "test", func(context.Context) error {
		calls++
		if calls < 4 {
			return apierrors.NewServiceUnavailable("later")
		}
		return nil
	})
	if err != nil || calls != 4 {
		t.Fatalf("err = %v after %d calls, want success on the 4th", err, calls)
	}
}

func TestDoStopsAtPermanentError(t *testing.T) {
	calls := 0
	perm := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "x", errors.New("rbac"))
	err := Do(t.Context(), Policy{Initial: time.Millisecond, Max: time.Millisecond, Budget: time.Second}, "test", func(context.Context) error {
		calls++
		return perm
	})
	if !errors.Is(err, perm) || calls != 1 {
		t.Fatalf("err = %v after %d calls, want the 403 after one call", err, calls)
	}
}

func TestDoGivesUpAfterBudget(t *testing.T) {
	calls := 0
	err := Do(t.Context(), Policy{Initial: time.Millisecond, Max: 5 * time.Millisecond, Budget: 50 * time.Millisecond}, "test", func(context.Context) error {
		calls++
		return apierrors.NewServiceUnavailable("later")
	})
	if !errors.Is(err, ErrBudgetExhausted) || !apierrors.IsServiceUnavailable(err) || calls < 2 {
		t.Fatalf("err = %v after %d calls, want ErrBudgetExhausted wrapping the 503", err, calls)
	}
}

func TestDoHonoursContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := Do(ctx, Policy{Initial: time.Hour, Max: time.Hour, Budget: time.Hour}, "test", func(context.Context) error {
		return apierrors.NewServiceUnavailable("later")
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

// A 403 right after the API server was unreachable is its authorizer warming
// up after a restart: retried. A 403 on the first attempt is an answer, and
// so is one that outlasts the warm-up.
func TestDoRetriesForbiddenOnlyWhileWarmingUp(t *testing.T) {
	gr := schema.GroupResource{Resource: "pods"}
	forbidden := apierrors.NewForbidden(gr, "x", errors.New("rbac"))
	refused := &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}
	p := Policy{Initial: time.Millisecond, Max: 2 * time.Millisecond, Budget: 5 * time.Second}

	calls := 0
	err := Do(t.Context(), p, "test", func(context.Context) error {
		calls++
		switch {
		case calls <= 2:
			return refused
		case calls <= 4:
			return forbidden
		}
		return nil
	})
	if err != nil || calls != 5 {
		t.Fatalf("refused, 403 twice, then ok: err = %v after %d calls, want success on the 5th", err, calls)
	}

	old := authorizerWarmup
	authorizerWarmup = 20 * time.Millisecond
	t.Cleanup(func() { authorizerWarmup = old })
	calls = 0
	err = Do(t.Context(), p, "test", func(context.Context) error {
		calls++
		if calls == 1 {
			return refused
		}
		return forbidden
	})
	if !errors.Is(err, forbidden) || calls < 3 {
		t.Fatalf("refused, then 403 for ever: err = %v after %d calls, want the 403 once the warm-up is over", err, calls)
	}
}

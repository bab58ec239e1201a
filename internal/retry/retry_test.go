package retry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
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

// A 403 from an API server whose /readyz fails (it just started: its
// authorizer and admission plugins still load) is retried; a 403 from a
// ready one is an answer at once, and so is any other error whatever
// /readyz says.
func TestNotReadyForbidden(t *testing.T) {
	var ready atomic.Bool
	var probes atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		probes.Add(1)
		if !ready.Load() {
			http.Error(w, "[-]poststarthook/rbac/bootstrap-roles failed", http.StatusInternalServerError)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	defer srv.Close()
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	server := cs.Discovery().RESTClient()
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "x", errors.New("rbac"))
	notFound := apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "x")
	p := Policy{Initial: time.Millisecond, Max: 2 * time.Millisecond, Budget: 5 * time.Second}

	// Not ready for three calls, then ready and allowing: retried to success.
	calls := 0
	err = Do(t.Context(), p, "test", func(ctx context.Context) error {
		calls++
		if calls <= 3 {
			return NotReady(ctx, server, forbidden)
		}
		return nil
	})
	if err != nil || calls != 4 {
		t.Fatalf("403 while not ready, then ok: err = %v after %d calls, want success on the 4th", err, calls)
	}

	// Ready: the 403 is an answer, on the first call.
	ready.Store(true)
	calls = 0
	err = Do(t.Context(), p, "test", func(ctx context.Context) error {
		calls++
		return NotReady(ctx, server, forbidden)
	})
	if !errors.Is(err, forbidden) || calls != 1 || IsTransient(err) {
		t.Fatalf("403 from a ready server: err = %v after %d calls, want the 403 at once", err, calls)
	}

	// Other answers are never turned transient, and never probe.
	ready.Store(false)
	before := probes.Load()
	if got := NotReady(t.Context(), server, notFound); !errors.Is(got, notFound) || IsTransient(got) {
		t.Errorf("404 while not ready: %v, want the 404 as an answer", got)
	}
	if got := NotReady(t.Context(), server, nil); got != nil {
		t.Errorf("no error: %v", got)
	}
	if probes.Load() != before {
		t.Errorf("/readyz asked for errors other than 403")
	}
	// An unreachable server is not ready either; a nil server leaves the 403 alone.
	srv.Close()
	if got := NotReady(t.Context(), server, forbidden); !IsTransient(got) || !apierrors.IsForbidden(got) {
		t.Errorf("403, /readyz unreachable: %v, want a transient 403", got)
	}
	if got := NotReady(t.Context(), nil, forbidden); IsTransient(got) {
		t.Errorf("403 without a server to ask: transient, want an answer")
	}
}

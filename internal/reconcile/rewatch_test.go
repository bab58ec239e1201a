package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
)

// retryLog is what a rewatch told its OnRetry hook.
type retryLog struct {
	attempts []int
	delays   []time.Duration
}

func newRewatch(l *retryLog) *rewatch {
	return &rewatch{Cluster: "wharf", Initial: time.Millisecond, Max: 8 * time.Millisecond, Log: slog.New(slog.DiscardHandler),
		OnRetry: func(attempt int, delay time.Duration) {
			l.attempts = append(l.attempts, attempt)
			l.delays = append(l.delays, delay)
		}}
}

// failing answers err for its first n calls, then a watch.
func failing(n int, err error) (func(context.Context) (watch.Interface, error), *int) {
	calls := 0
	return func(context.Context) (watch.Interface, error) {
		calls++
		if calls <= n {
			return nil, err
		}
		return watch.NewEmptyWatch(), nil
	}, &calls
}

var errRefused = fmt.Errorf("dial tcp 127.0.0.1:6443: %w", syscall.ECONNREFUSED)

// A spoke that refuses connections is watched again after delays that
// double from Initial and stop growing at Max, however long it refused;
// once a watch is established the next outage starts from Initial again —
// client-go's reflector would wait up to a minute after a few outages.
func TestRewatchBackoffIsCappedAndResets(t *testing.T) {
	var l retryLog
	w := newRewatch(&l)
	open, calls := failing(7, errRefused)
	if _, err := w.watch(t.Context(), open); err != nil {
		t.Fatalf("watch: %v", err)
	}
	if *calls != 8 {
		t.Fatalf("%d calls, want 7 refused and one established", *calls)
	}
	if diff := cmp.Diff([]int{1, 2, 3, 4, 5, 6, 7}, l.attempts); diff != "" {
		t.Errorf("attempts (-want +got):\n%s", diff)
	}
	nominal := []time.Duration{1, 2, 4, 8, 8, 8, 8}
	for i, d := range l.delays {
		want := nominal[i] * time.Millisecond
		if d > want || d < want-want/4 {
			t.Errorf("delay after attempt %d is %v, want %v less at most a quarter of jitter", i+1, d, want)
		}
	}

	l = retryLog{}
	open, _ = failing(2, errRefused)
	if _, err := w.watch(t.Context(), open); err != nil {
		t.Fatalf("watch after an established one: %v", err)
	}
	if diff := cmp.Diff([]int{1, 2}, l.attempts); diff != "" {
		t.Errorf("attempts after an established watch (-want +got):\n%s", diff)
	}
	if d := l.delays[0]; d > time.Millisecond {
		t.Errorf("first delay after an established watch is %v, want at most Initial (1ms): the backoff was not reset", d)
	}
}

// Errors that are answers reach the reflector at once, untouched: a 410
// needs its relist, a 403 from a ready server is an RBAC gap to report, and
// a cancelled context stops the retries.
func TestRewatchReturnsAnswers(t *testing.T) {
	gone := apierrors.NewResourceExpired("too old resource version")
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", fmt.Errorf("no watch"))
	for name, err := range map[string]error{"gone": gone, "forbidden": forbidden, "bad request": apierrors.NewBadRequest("x")} {
		t.Run(name, func(t *testing.T) {
			var l retryLog
			open, calls := failing(1, err)
			if _, got := newRewatch(&l).watch(t.Context(), open); !errors.Is(got, err) {
				t.Fatalf("watch returned %v, want %v", got, err)
			}
			if *calls != 1 || len(l.attempts) != 0 {
				t.Errorf("%d calls and %d retries, want 1 call and none", *calls, len(l.attempts))
			}
		})
	}
	t.Run("cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		var l retryLog
		w := newRewatch(&l)
		w.OnRetry = func(int, time.Duration) { cancel() }
		open, calls := failing(100, errRefused)
		if _, err := w.watch(ctx, open); !errors.Is(err, errRefused) {
			t.Fatalf("watch returned %v, want the last error", err)
		}
		if *calls != 1 {
			t.Errorf("%d calls after the context ended, want 1", *calls)
		}
	})
}

// A list that fails transiently is retried the same way, and its result is
// the first success's.
func TestRewatchRetriesList(t *testing.T) {
	var l retryLog
	calls := 0
	obj, err := newRewatch(&l).list(t.Context(), func(context.Context) (runtime.Object, error) {
		calls++
		if calls < 3 {
			return nil, apierrors.NewServiceUnavailable("starting")
		}
		return &runtime.Unknown{Raw: []byte("ok")}, nil
	})
	if err != nil || string(obj.(*runtime.Unknown).Raw) != "ok" {
		t.Fatalf("list = %v, %v", obj, err)
	}
	if diff := cmp.Diff([]int{1, 2}, l.attempts); diff != "" {
		t.Errorf("attempts (-want +got):\n%s", diff)
	}
}

package controller

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
)

// TestRunAll: any runnable returning stops the others, Run returns the first
// error (not the ones the others give on the way out), and started is called
// once everything is launched.
func TestRunAll(t *testing.T) {
	errBind := errors.New("listen: address in use")
	// waiter blocks until its context ends, then returns what it is given.
	waiter := func(stopped *atomic.Int32, onStop error) func(context.Context) error {
		return func(ctx context.Context) error {
			<-ctx.Done()
			stopped.Add(1)
			return onStop
		}
	}
	tests := []struct {
		name    string
		first   func(context.Context) error // the runnable that ends on its own
		onStop  error                       // what the others return when stopped
		cancel  bool                        // the parent context ends instead
		want    error
		wantMsg string
	}{
		{name: "one fails", first: func(context.Context) error { return fmt.Errorf("internal listener: %w", errBind) }, want: errBind,
			wantMsg: "internal listener: listen: address in use"},
		{name: "one fails, the others report their stop", first: func(context.Context) error { return errBind },
			onStop: context.Canceled, want: errBind, wantMsg: errBind.Error()},
		{name: "one returns without an error", first: func(context.Context) error { return nil }},
		{name: "the parent ends", cancel: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stopped atomic.Int32
			runnables := []runnable{runFunc(waiter(&stopped, tt.onStop)), runFunc(waiter(&stopped, tt.onStop))}
			if tt.first != nil {
				runnables = append(runnables, runFunc(tt.first))
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			started := 0
			err := runAll(ctx, runnables, func() {
				started++
				if tt.cancel {
					cancel()
				}
			})
			if started != 1 {
				t.Errorf("started called %d times, want 1", started)
			}
			if got := stopped.Load(); got != 2 {
				t.Errorf("%d of 2 waiting runnables stopped before runAll returned", got)
			}
			switch {
			case tt.want == nil && err != nil:
				t.Fatalf("runAll = %v, want nil", err)
			case tt.want != nil && (!errors.Is(err, tt.want) || err.Error() != tt.wantMsg):
				t.Fatalf("runAll = %v, want %q wrapping %v", err, tt.wantMsg, tt.want)
			}
		})
	}
}

// runFunc is a runnable of a test.
type runFunc func(context.Context) error

func (f runFunc) Start(ctx context.Context) error { return f(ctx) }

// Package devstacktest starts devstack stacks for tests: one stack shared by
// every test of a package (Main and Shared), or one per test (Start). Either
// way everything is stopped and removed when the tests end, also when they
// fail.
package devstacktest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"crucible.dev/crucible/internal/devstack"
)

var (
	sharedOpts  devstack.Options
	sharedOnce  sync.Once
	sharedStack *devstack.Stack
	sharedErr   error
)

// Main runs the package's tests and then stops the shared stack, if a test
// started one. Call it from TestMain: os.Exit(devstacktest.Main(m, opts)).
func Main(m *testing.M, opts devstack.Options) int {
	sharedOpts = opts
	code := m.Run()
	if sharedStack != nil {
		sharedStack.Stop()
	}
	return code
}

// Shared returns the package's shared stack, starting it on first use. Tests
// that use it must not disturb one another (own namespaces or object names).
func Shared(tb testing.TB) *devstack.Stack {
	tb.Helper()
	skipShort(tb)
	sharedOnce.Do(func() {
		opts := sharedOpts
		if testing.Verbose() {
			opts.Progress = func(format string, args ...any) {
				fmt.Fprintf(os.Stderr, "devstack: "+format+"\n", args...)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		sharedStack, sharedErr = devstack.Start(ctx, opts)
	})
	if sharedErr != nil {
		tb.Fatalf("start shared dev stack: %v", sharedErr)
	}
	return sharedStack
}

// Start starts a stack of the test's own, stopped by t.Cleanup.
func Start(tb testing.TB, opts devstack.Options) *devstack.Stack {
	tb.Helper()
	skipShort(tb)
	if opts.Progress == nil {
		opts.Progress = func(format string, args ...any) { tb.Logf("devstack: "+format, args...) }
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := devstack.Start(ctx, opts)
	if err != nil {
		tb.Fatalf("start dev stack: %v", err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// skipShort skips tests on real API servers under -short (make unit); make test
// and CI never pass -short, so there they always run.
func skipShort(tb testing.TB) {
	tb.Helper()
	if testing.Short() {
		tb.Skip("needs real API servers; run without -short")
	}
}

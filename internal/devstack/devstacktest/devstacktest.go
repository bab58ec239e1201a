// Package devstacktest starts devstack stacks for tests: one stack shared by
// every test of a package (Main and Shared), or one per test (Start). Either
// way everything is stopped and removed when the tests end, also when they
// fail.
package devstacktest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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

	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

// BuildCrucible, as Options.Crucible, makes Shared and Start build the
// crucible binary from this checkout (once per test process) and run the
// federation with it.
const BuildCrucible = "<build crucible>"

// ControllerPprofEnv names the loopback HOST:PORT on which Start's stacks
// serve their controller's profiler (Options.ControllerPprofListen), so
// that a benchmark is profiled as it runs in `make bench`, with no edit:
// CRUCIBLE_CONTROLLER_PPROF=127.0.0.1:6061 go test -bench … ./test/e2e.
const ControllerPprofEnv = "CRUCIBLE_CONTROLLER_PPROF"

// APIServerProfilingEnv, set to true, serves the /debug/pprof of Start's
// stacks' kube-apiservers (Options.APIServerProfiling), read with a
// cluster's admin kubeconfig: kubectl --kubeconfig DIR/wharf.kubeconfig get
// --raw '/debug/pprof/profile?seconds=30'.
const APIServerProfilingEnv = "CRUCIBLE_APISERVER_PROFILING"

// Main runs the package's tests and then stops the shared stack, if a test
// started one. Call it from TestMain: os.Exit(devstacktest.Main(m, opts)).
func Main(m *testing.M, opts devstack.Options) int {
	sharedOpts = opts
	code := m.Run()
	if sharedStack != nil {
		if code != 0 {
			logTails(sharedStack, func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) })
		}
		sharedStack.Stop()
	}
	if binDir != "" {
		_ = os.RemoveAll(binDir)
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
		if opts.Crucible == BuildCrucible {
			if opts.Crucible, sharedErr = crucibleBinary(); sharedErr != nil {
				return
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
	if opts.ControllerPprofListen == "" {
		opts.ControllerPprofListen = os.Getenv(ControllerPprofEnv)
	}
	if v := os.Getenv(APIServerProfilingEnv); v != "" && !opts.APIServerProfiling {
		on, err := strconv.ParseBool(v)
		if err != nil {
			tb.Fatalf("$%s=%q: want true or false", APIServerProfilingEnv, v)
		}
		opts.APIServerProfiling = on
	}
	if opts.Crucible == BuildCrucible {
		bin, err := crucibleBinary()
		if err != nil {
			tb.Fatal(err)
		}
		opts.Crucible = bin
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := devstack.Start(ctx, opts)
	if err != nil {
		tb.Fatalf("start dev stack: %v", err)
	}
	tb.Cleanup(s.Stop)
	tb.Cleanup(func() { logTailsOnFailure(tb, s) }) // runs before Stop removes the logs
	return s
}

// tailLines is how much of each process's log a failed test shows.
const tailLines = 40

// logTailsOnFailure shows the end of every process's log when the test
// failed: a failure seen only in CI is then read from its output, with the
// controller's and the spokes' side of it, instead of guessed at.
func logTailsOnFailure(tb testing.TB, s *devstack.Stack) {
	if tb.Failed() {
		logTails(s, tb.Logf)
	}
}

// logTails shows the end of each of s's process logs with logf.
func logTails(s *devstack.Stack, logf func(format string, args ...any)) {
	logs, _ := filepath.Glob(filepath.Join(s.Dir, "logs", "*.log"))
	for _, l := range logs {
		logf("--- last %d lines of %s ---\n%s", tailLines, filepath.Base(l), devstack.LogTail(l, tailLines))
	}
}

// skipShort skips tests on real API servers under -short (make unit); make test
// and CI never pass -short, so there they always run.
func skipShort(tb testing.TB) {
	tb.Helper()
	if testing.Short() {
		tb.Skip("needs real API servers; run without -short")
	}
}

// crucibleBinary builds cmd/crucible once per test process. Main removes it.
func crucibleBinary() (string, error) {
	binOnce.Do(func() {
		// Left 0700, as MkdirTemp makes it: pods run as nobody, and the dev
		// runtime must make the binary runnable for them wherever it lies
		// (the push tests prove it does).
		binDir, binErr = os.MkdirTemp("", "crucible-bin-")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "crucible")
		cmd := exec.Command("go", "build", "-o", binPath, "crucible.dev/crucible/cmd/crucible")
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("build crucible: %w\n%s", err, out)
		}
	})
	return binPath, binErr
}

// CrucibleBinary returns the path of a crucible binary built from this
// checkout, building it on first use; Main removes it.
func CrucibleBinary(tb testing.TB) string {
	tb.Helper()
	bin, err := crucibleBinary()
	if err != nil {
		tb.Fatal(err)
	}
	return bin
}

package e2e

import (
	"os"
	"testing"

	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
	"crucible.dev/crucible/internal/store/pgtest"
)

// stacksEnv selects the package's tests by the stack they run on (doc.go):
// "shared", the tests that share one stack (make test), or "own", those
// that start a stack of their own (make acceptance); unset, both.
const stacksEnv = "CRUCIBLE_E2E_STACKS"

var stacks = os.Getenv(stacksEnv)

// sharedStack is the package's one stack (devstacktest.Shared), or a skip
// where only the tests with stacks of their own run.
func sharedStack(tb testing.TB) *devstack.Stack {
	tb.Helper()
	if stacks == "own" {
		tb.Skip(stacksEnv + "=own: this test shares the package's stack; make test runs it")
	}
	return devstacktest.Shared(tb)
}

// ownStack starts a stack of the test's own (devstacktest.Start), or skips
// where only the tests that share one run.
func ownStack(tb testing.TB, opts devstack.Options) *devstack.Stack {
	tb.Helper()
	skipOwn(tb)
	return devstacktest.Start(tb, opts)
}

// ownStackOnPostgres is ownStack with the store on PostgreSQL
// (devstacktest.StartOnPostgres).
func ownStackOnPostgres(tb testing.TB, opts devstack.Options) (*devstack.Stack, *pgtest.Server) {
	tb.Helper()
	skipOwn(tb)
	return devstacktest.StartOnPostgres(tb, opts)
}

func skipOwn(tb testing.TB) {
	tb.Helper()
	if stacks == "shared" {
		tb.Skip(stacksEnv + "=shared: this test starts a stack of its own; make acceptance runs it")
	}
}

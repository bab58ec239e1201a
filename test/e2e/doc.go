// Package e2e holds crucible's end-to-end tests: real kube-apiservers, etcd and
// kwok from devstack, with crucible's own binary running the controller and
// the spokes' authn webhooks, exercised the way a platform engineer's clusters
// would exercise them.
//
// Most tests share one stack (sharedStack) and run one at a time, in their
// own namespaces or object names; make test runs them. A test that takes a
// stack apart — stops the hub, rotates its key, restarts the controller with
// other settings, runs replicas on PostgreSQL — starts a stack of its own
// (ownStack) and calls t.Parallel: Go runs such tests after the shared ones,
// side by side, so their waits (lease expiries, drain timeouts, staleness
// bounds) overlap instead of adding up; make acceptance runs them, beside
// the chaos subset. CRUCIBLE_E2E_STACKS (shared or own) is how the two
// targets choose; without it, go test runs both. A test of its own stack
// must touch nothing outside it (no t.Setenv, no package variables).
package e2e

// Package chaos injects faults into a running dev stack (real kube-apiservers,
// the controller, the spokes' authn webhooks and real pods from the dev
// runtime) while a wave of work pods runs, and counts what happened: pods
// submitted, completed, duplicated and lost, artifacts pushed and stored,
// requests by status. `make chaos` runs every scenario at full load and writes
// chaos/results.md and chaos/results.json; `make acceptance` runs a reduced,
// deterministic subset, where the scenarios on stacks of their own run side
// by side (see scenario.stack). Seeds are printed (CRUCIBLE_CHAOS_SEED
// replays one).
package chaos

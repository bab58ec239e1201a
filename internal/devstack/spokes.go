package devstack

import (
	"fmt"
	"os"
	"slices"
	"strings"
)

// A fleet of spokes on one machine: names for N of them, and what each
// spoke's agents run with so that ten fit on two cores.

// spokeNames are the first spokes' names: wharf and dock, the two every doc
// and test names, then more words of the same field, so that a fleet of
// up to ten reads like one; beyond them SpokeNames numbers.
var spokeNames = []string{"wharf", "dock", "pier", "quay", "jetty", "berth", "slip", "mole", "marina", "haven"}

// SpokeNames returns n spoke names, stable across calls and releases so
// that a script or test can name the third spoke: wharf, dock, pier, quay,
// jetty, berth, slip, mole, marina, haven, then spoke-11, spoke-12, …
// Every name is a DNS label. n ≤ 0 gives none.
func SpokeNames(n int) []string {
	names := make([]string, 0, max(n, 0))
	for i := range max(n, 0) {
		if i < len(spokeNames) {
			names = append(names, spokeNames[i])
			continue
		}
		names = append(names, fmt.Sprintf("spoke-%02d", i+1))
	}
	return names
}

// NamedSpokes is one SpokeOptions per name, each with its default nodes:
// Options.Spokes for a fleet, as in NamedSpokes(SpokeNames(10)...).
func NamedSpokes(names ...string) []SpokeOptions {
	spokes := make([]SpokeOptions, len(names))
	for i, n := range names {
		spokes[i] = SpokeOptions{Name: n}
	}
	return spokes
}

// spokeControllers are the kube-controller-manager controllers a spoke
// runs: what crucible and the tests on the stack rely on, and nothing that
// would add informers (the biggest part of the process's memory) for
// resources nobody here uses.
//
//   - garbage-collector: a work pod's ConfigMap and Secret are owned by
//     the pod (R-C3) and go with it; a Job's pods with the Job.
//   - namespace: a test's namespace is deleted with what is in it.
//   - serviceaccount, serviceaccount-token: every namespace's default
//     account (the stack waits for it), as a real spoke has.
//   - root-ca-certificate-publisher: kube-root-ca.crt, which the projected
//     kube-api-access volume of every pod that mounts a token reads.
//   - node-lifecycle, taint-eviction: the not-ready taint comes off a new
//     node, and a node that stops reporting is tainted and drained as on
//     a real spoke.
//   - pod-garbage-collector: pods of a deleted node go.
//   - job, ttl-after-finished: Kueue's workers run batch Jobs (make
//     interop, the multikueue benchmark).
//   - clusterrole-aggregation: admin, edit and view get their rules, for
//     anyone who binds them on a dev spoke.
//   - resourcequota: a ResourceQuota admits nothing until this controller
//     has counted its namespace; a spoke's quota refusing a create for
//     capacity moves a placed pod on (issue 39).
//
// Left out: workload controllers besides Job (a Deployment here makes no
// ReplicaSet), services' endpoints, volumes, disruption budgets,
// autoscaling, certificates, DRA and the rest.
var spokeControllers = []string{
	"garbage-collector-controller",
	"namespace-controller",
	"serviceaccount-controller",
	"serviceaccount-token-controller",
	"root-ca-certificate-publisher-controller",
	"node-lifecycle-controller",
	"taint-eviction-controller",
	"pod-garbage-collector-controller",
	"job-controller",
	"ttl-after-finished-controller",
	"clusterrole-aggregation-controller",
	"resourcequota-controller",
}

func spokeControllersFlag() string { return "--controllers=" + strings.Join(spokeControllers, ",") }

// spokeGOGC is the Go garbage collector's target for every process of a
// spoke (the default is 100): an idle spoke's kube-apiserver keeps about
// 90 MiB of live heap and, at the default, grows to twice that before it
// collects. At 50 it holds about 40 MiB less for a collection twice as
// often, which an idle spoke hardly pays for. The hub's kube-apiserver, on
// every request's path, keeps the default.
const spokeGOGC = "GOGC=50"

// processEnv is the environment of the stack's process called name: this
// process's, with spokeGOGC for a spoke's processes unless GOGC is set
// already (nil: inherit it unchanged).
func processEnv(name string) []string {
	if _, set := os.LookupEnv("GOGC"); set || !isSpokeProcess(name) {
		return nil
	}
	return append(os.Environ(), spokeGOGC)
}

// SpokeProcessEnv is the environment the stack gives a spoke's processes
// (spokeGOGC unless GOGC is set): for a test's own process that stands in
// for one, such as webhooktest's null webhook, so that the two compare under
// the same garbage collector target.
func SpokeProcessEnv() []string {
	if env := processEnv("crucible-webhook-"); env != nil { // as a spoke's webhook
		return env
	}
	return os.Environ()
}

// isSpokeProcess reports whether the stack's process called name runs for
// one spoke: spokeProcesses, and not the hub's kube-apiserver.
func isSpokeProcess(name string) bool {
	return name != "kube-apiserver-"+hubName && slices.ContainsFunc(spokeProcesses, func(prefix string) bool { return strings.HasPrefix(name, prefix) })
}

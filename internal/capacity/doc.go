// Package capacity owns one spoke's capacity view: what its nodes offer
// and what its pods take, watched as kube-scheduler watches them, and the
// judgment made from it — would some node take this pod now — with
// placements in flight counted against the node they will most likely land
// on (reservations), so that a burst of placements does not send every pod
// to the same last free GPU.
//
// The view keeps per pod only its namespace, name, node and summed requests
// (transformed on decode), and per node only what the judgment reads, so a
// spoke with 100,000 pods costs tens of MiB, not gigabytes. It judges with
// the helpers kube-scheduler itself uses (k8s.io/component-helpers'
// resource.PodRequests, nodeaffinity and FindMatchingUntoleratedTaint); it
// does not judge what kube-scheduler's other plugins decide (pod
// (anti-)affinity, topology spread, ports, volumes, DRA), so a pod it says
// fits may still wait.
package capacity

// Package devstack runs a real local hub and spoke clusters: one etcd, a hub
// kube-apiserver and, per spoke, a kube-apiserver, kube-scheduler,
// kube-controller-manager, kwok as its nodes (with capacity, labels and
// taints, wharf's GPU node among them) and a dev runtime as their kubelet,
// which runs every pod's command as a local process (development only: the
// image is ignored). It is what crucible's tests and `crucible dev up` run on,
// so that Kubernetes behaviour is exercised against real API servers rather
// than fakes.
//
// Every address is a free loopback port chosen at start; readiness is polled;
// every process is started by PID and stopped by PID. Hub and spokes share the
// service-account issuer https://kubernetes.default.svc, as ADR-0048's clusters
// do, but sign with different keys.
package devstack

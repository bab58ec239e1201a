// Package e2e holds crucible's end-to-end tests: real kube-apiservers, etcd and
// kwok from devstack, with crucible's own binary running the controller and
// the spokes' authn webhooks, exercised the way a platform engineer's clusters
// would exercise them.
package e2e

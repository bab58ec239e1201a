// Package render owns the Kubernetes objects crucible creates on a spoke: a
// work pod with its files ConfigMap and Secret, rendered from the profile's
// cluster entry (R-C3), and the spoke RBAC of the controller's identity
// (R-ID4). It builds objects only; creating them is the dispatcher's job, and
// `crucible render` prints them for people who do not use Helm (R-D3). What a
// work pod is, and whether one is valid, is internal/workpod's: render takes
// a pod workpod.Check accepted and does not judge it again.
package render

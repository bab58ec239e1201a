// Package deploy holds what installs crucible: the Helm charts under helm/
// (tested against real API servers in test/e2e) and the test of the OCI
// image that `make image` builds (hack/tools/image). It has no code of its
// own.
package deploy

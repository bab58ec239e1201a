//go:build tools

// Package tools records the commands built from this module so that go mod tidy
// keeps their dependencies.
package tools

import _ "sigs.k8s.io/kueue/cmd/kueue"

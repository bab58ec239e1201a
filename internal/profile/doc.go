// Package profile owns the controller's configuration: the profile (one
// TOML file, R-C1), its typed form, its strict decoding, its defaults (the
// one home of every default of a profile key), its validation — every
// section, each problem with its key path, in one field.ErrorList — the pod
// classes a work pod asks of a spoke, the leader-election settings, and
// what a reload may apply of a changed profile.
//
// It is pure configuration: nothing here reaches a cluster, so it imports
// no client-go. Package fleet builds the spoke clients from its cluster
// entries.
package profile

// Package fleet owns crucible's connections to its clusters: one shared
// client per spoke (R-ID1, R-ID2), built from the profile's cluster entries
// (package profile), that authenticates with the controller's projected
// service-account token, re-read from its file as the kubelet rotates it,
// or with a token of the same identity asked of the hub's TokenRequest API
// and held in memory (token_source = "request", R-FL1), plus the clusters'
// health (reachable, credentials valid, token expiry) for the API and
// /metrics.
//
// Every other package takes its cluster clients from here; no other package
// builds a client for a spoke.
package fleet

// Package store owns the controller's durable state: work pods (one row per
// pod crucible dispatched, keyed by id and attributed to the spoke cluster it
// runs on), each pod's history (its state changes, recorded by the store
// itself, and what its spoke said of its start and waits) and the artifacts
// recorded for them.
//
// Everything else in the controller reads and writes that state only through
// the Store interface, so that the same code runs on the embedded SQLite
// database (single replica, pure Go, no cgo) and on PostgreSQL (several
// replicas sharing one database, R-C10). The schema is created and upgraded by
// numbered migrations embedded in the binary; Open applies them.
//
// One conformance suite (package storetest) is run against both backends, and
// package pgtest starts the throwaway PostgreSQL server the tests use.
package store

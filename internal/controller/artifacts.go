package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"crucible.dev/crucible/internal/api"
	"crucible.dev/crucible/internal/artifact"
	"crucible.dev/crucible/internal/artifact/pgblob"
	"crucible.dev/crucible/internal/ingest"
	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/reconcile"
)

// artifactBytes is what the drop-box, the API and log collection need of
// the artifact bytes; artifact.Dir and pgblob.Blobs both have it.
type artifactBytes interface {
	ingest.Blobs
	api.ArtifactReader
	reconcile.LogBlobs
}

var (
	_ artifactBytes = artifact.Dir{}
	_ artifactBytes = (*pgblob.Blobs)(nil)
)

// staleStaging is how long a staged blob in PostgreSQL may go untouched
// before a starting replica removes it as a crash's leftover. An upload at
// the minimum rate (4 KiB/s) writes a 1 MiB chunk in about four minutes.
const staleStaging = time.Hour

// ErrSQLiteShared: another controller process holds the SQLite store.
var ErrSQLiteShared = errors.New("the SQLite store is in use by another controller")

// openArtifacts picks where artifact bytes live: in PostgreSQL when the store
// is PostgreSQL, so every replica serves every artifact; else the local
// directory. It also clears what a crash left staged. The returned func
// releases what it holds.
func openArtifacts(ctx context.Context, c profile.Controller, log *slog.Logger) (artifactBytes, func(), error) {
	if profile.IsPostgres(c.Store) {
		b, err := pgblob.Open(ctx, c.Store)
		if err != nil {
			return nil, nil, fmt.Errorf("artifacts: %w", err)
		}
		if n, err := b.RemoveStale(ctx, staleStaging); err != nil {
			log.Warn("removing stale staged artifacts failed", "error", err)
		} else if n > 0 {
			log.Info("removed staged artifacts left by a crash", "blobs", n)
		}
		return b, func() { _ = b.Close() }, nil
	}
	// sqlite:PATH, or sqlite:///abs/path as the store reads it.
	path := strings.TrimPrefix(strings.TrimPrefix(c.Store, "sqlite:"), "//")
	unlock, err := lockSQLite(path)
	if err != nil {
		return nil, nil, err
	}
	d := artifact.Dir{Root: c.ArtifactsDir}
	n, err := d.CleanTemp() // before anything stages
	if err != nil {
		unlock()
		return nil, nil, fmt.Errorf("artifacts: %w", err)
	}
	if n > 0 {
		log.Info("removed temp artifact files left by a crash", "files", n)
	}
	return d, unlock, nil
}

// lockSQLite takes an exclusive lock beside the SQLite file for the life of
// the process, so that a second replica on a shared volume refuses to start
// rather than run the loops twice beside a local artifacts directory the
// other cannot see. The kernel drops the lock when the process dies.
func lockSQLite(path string) (func(), error) {
	name := path + ".controller.lock"
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock the SQLite store: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil { //nolint:gosec // a file descriptor fits an int
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w (%s): SQLite serves one controller; run more than one replica on PostgreSQL with [controller] leader_elect", ErrSQLiteShared, name)
		}
		return nil, fmt.Errorf("lock the SQLite store: %w", err)
	}
	return func() { f.Close() }, nil
}

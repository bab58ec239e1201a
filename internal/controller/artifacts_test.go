package controller

import (
	"errors"
	"log/slog"
	"path/filepath"
	"testing"

	"crucible.dev/crucible/internal/artifact"
	"crucible.dev/crucible/internal/profile"
)

// TestSQLiteServesOneController: a second controller on the same SQLite
// file (a shared volume, two replicas) refuses to start, saying why; once
// the first lets go, it may.
func TestSQLiteServesOneController(t *testing.T) {
	dir := t.TempDir()
	c := profile.Controller{Store: "sqlite:" + filepath.Join(dir, "crucible.db"), ArtifactsDir: filepath.Join(dir, "artifacts")}
	first, release, err := openArtifacts(t.Context(), c, discard())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := first.(artifact.Dir); !ok {
		t.Errorf("artifacts with SQLite are %T, want the directory", first)
	}
	if _, _, err := openArtifacts(t.Context(), c, discard()); !errors.Is(err, ErrSQLiteShared) {
		t.Fatalf("second controller on one SQLite store: %v, want ErrSQLiteShared", err)
	}
	release()
	_, release, err = openArtifacts(t.Context(), c, discard())
	if err != nil {
		t.Fatalf("after the first released the store: %v", err)
	}
	release()
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

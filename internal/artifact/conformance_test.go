package artifact_test

import (
	"testing"

	"crucible.dev/crucible/internal/artifact"
	"crucible.dev/crucible/internal/artifact/blobtest"
)

// TestDirConformance runs the suite that pgblob passes too against the
// directory, the SQLite controller's artifact store.
func TestDirConformance(t *testing.T) {
	blobtest.Run(t, func(t *testing.T) blobtest.Blobs { return artifact.Dir{Root: t.TempDir()} })
}

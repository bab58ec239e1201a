package store

import (
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"crucible.dev/crucible/internal/store/pgtest"
)

// TestMigrationArtifactSource: rows recorded before migration 0002 get a
// source — 'log' the controller's, every other kind the pod's — and the
// column then refuses anything but the two sources.
func TestMigrationArtifactSource(t *testing.T) {
	backends := []struct {
		d        dialect
		driver   string
		database func(t *testing.T) (raw, dsn string)
	}{
		{dialectSQLite, "sqlite", func(t *testing.T) (string, string) {
			path := filepath.Join(t.TempDir(), "m.db")
			return path + "?_txlock=immediate&_pragma=busy_timeout(10000)", path
		}},
		{dialectPostgres, "pgx", func(t *testing.T) (string, string) {
			dsn := pgtest.NewDatabase(t)
			return dsn, dsn
		}},
	}
	for _, b := range backends {
		t.Run(string(b.d), func(t *testing.T) {
			ctx := t.Context()
			rawDSN, dsn := b.database(t)
			db := openRaw(t, b.driver, rawDSN)
			steps, err := embeddedSteps(b.d)
			if err != nil {
				t.Fatal(err)
			}
			if err := migrate(ctx, db, b.d, steps[:1]); err != nil {
				t.Fatalf("migrate to 0001: %v", err)
			}
			if _, err := db.ExecContext(ctx, b.d.rebind(`INSERT INTO work_pods (id, cluster, namespace, kind, state, spec, created_at, updated_at)
				VALUES ('old', 'wharf', 'loops', 'turn', 'succeeded', ?, 1, 1)`), []byte{}); err != nil {
				t.Fatalf("insert pod: %v", err)
			}
			for _, q := range []string{
				`INSERT INTO artifacts (pod_id, kind, size, sha256, created_at) VALUES ('old', 'log', 3, 'l', 1)`,
				`INSERT INTO artifacts (pod_id, kind, size, sha256, created_at) VALUES ('old', 'result', 4, 'r', 1)`,
			} {
				if _, err := db.ExecContext(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			s, err := Open(ctx, dsn)
			if err != nil {
				t.Fatalf("open (migrates to the latest): %v", err)
			}
			defer s.Close()
			arts, err := s.ListArtifacts(ctx, "old")
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]Source{}
			for _, a := range arts {
				got[a.Kind] = a.Source
			}
			if diff := cmp.Diff(map[string]Source{"log": SourceController, "result": SourcePod}, got); diff != "" {
				t.Errorf("sources after migration (-want +got):\n%s", diff)
			}
			if _, err := db.ExecContext(ctx, b.d.rebind(`INSERT INTO artifacts (pod_id, kind, size, sha256, source, created_at)
				VALUES ('old', 'x', 1, 'x', ?, 1)`), "spoke"); err == nil {
				t.Error("source 'spoke' accepted by the schema")
			}
		})
	}
}

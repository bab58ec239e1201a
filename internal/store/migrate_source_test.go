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

// TestMigrationArtifactTotal: the total that migration 0007 keeps starts
// from the artifacts recorded before it, and follows what the store never
// does itself but an operator may: deleting pods (their artifacts cascade)
// or artifacts, and on PostgreSQL truncating them.
func TestMigrationArtifactTotal(t *testing.T) {
	backends := []struct {
		d      dialect
		driver string
		fresh  func(t *testing.T) (raw, dsn string)
	}{
		{dialectSQLite, "sqlite", func(t *testing.T) (string, string) {
			path := filepath.Join(t.TempDir(), "m.db")
			return path + "?_txlock=immediate&_pragma=busy_timeout(10000)&_pragma=foreign_keys(1)", path
		}},
		{dialectPostgres, "pgx", func(t *testing.T) (string, string) {
			dsn := pgtest.NewDatabase(t)
			return dsn, dsn
		}},
	}
	for _, b := range backends {
		t.Run(string(b.d), func(t *testing.T) {
			ctx := t.Context()
			rawDSN, dsn := b.fresh(t)
			db := openRaw(t, b.driver, rawDSN)
			steps, err := embeddedSteps(b.d)
			if err != nil {
				t.Fatal(err)
			}
			if err := migrate(ctx, db, b.d, steps[:6]); err != nil {
				t.Fatalf("migrate to 0006: %v", err)
			}
			for _, q := range []string{
				`INSERT INTO work_pods (id, cluster, namespace, kind, state, spec, created_at, updated_at) VALUES ('old', 'wharf', 'loops', 'turn', 'succeeded', ?, 1, 1)`,
				`INSERT INTO work_pods (id, cluster, namespace, kind, state, spec, created_at, updated_at) VALUES ('kept', 'wharf', 'loops', 'turn', 'succeeded', ?, 1, 1)`,
			} {
				if _, err := db.ExecContext(ctx, b.d.rebind(q), []byte{}); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			for _, q := range []string{
				`INSERT INTO artifacts (pod_id, kind, size, sha256, source, created_at) VALUES ('old', 'log', 3, 'l', 'controller', 1)`,
				`INSERT INTO artifacts (pod_id, kind, size, sha256, source, created_at) VALUES ('old', 'result', 4, 'r', 'pod', 1)`,
				`INSERT INTO artifacts (pod_id, kind, size, sha256, source, created_at) VALUES ('kept', 'result', 5, 'k', 'pod', 1)`,
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
			wantTotal := func(what string, want int64) {
				t.Helper()
				if got, err := s.ArtifactBytes(ctx); err != nil || got != want {
					t.Errorf("%s: ArtifactBytes = %d, %v; want %d", what, got, err, want)
				}
			}
			wantTotal("rows from before the migration", 12)
			if _, err := db.ExecContext(ctx, `DELETE FROM work_pods WHERE id = 'old'`); err != nil {
				t.Fatal(err)
			}
			wantTotal("after deleting a pod", 5)
			if _, err := db.ExecContext(ctx, `DELETE FROM artifacts WHERE pod_id = 'kept'`); err != nil {
				t.Fatal(err)
			}
			wantTotal("after deleting an artifact", 0)
			if b.d != dialectPostgres {
				return
			}
			if _, err := s.PutArtifact(ctx, Artifact{PodID: "kept", Kind: "again", Size: 9, SHA256: "a", Source: SourcePod}, Quota{}); err != nil {
				t.Fatal(err)
			}
			wantTotal("after a put", 9)
			if _, err := db.ExecContext(ctx, `TRUNCATE artifacts`); err != nil {
				t.Fatal(err)
			}
			wantTotal("after a truncate", 0)
		})
	}
}

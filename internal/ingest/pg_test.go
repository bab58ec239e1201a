package ingest

import (
	"database/sql"
	"io"
	"net/http"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"

	"crucible.dev/crucible/internal/artifact/pgblob"
	"crucible.dev/crucible/internal/store"
	"crucible.dev/crucible/internal/store/pgtest"
)

// TestMain shares one throwaway PostgreSQL server among the package's tests
// that ask for one (started on first use).
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// TestTwoReplicasOnPostgres: two drop-box replicas, each with its own
// connection to the artifact bytes in one PostgreSQL, race 50 uploads of
// different bytes: one 201, 49 409, and the only blob left is the recorded
// one (every loser removed its own). The same bytes again through the other
// replica are 200, and no free-space floor applies to a database.
func TestTwoReplicasOnPostgres(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	st, err := store.Open(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	blobs := func() *pgblob.Blobs {
		b, err := pgblob.Open(t.Context(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
	first, secondBlobs := blobs(), blobs()
	e := newEnv(t, func(o *Options) { o.Store, o.Artifacts = st, first })
	e.store = st
	if e.h.opts.freeBytes != nil {
		t.Error("a free-space floor on artifacts in PostgreSQL")
	}
	opts := e.h.opts.Options
	opts.Artifacts = secondBlobs
	second, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	tok := e.addPod("wp-1", "uid-1")
	codes := raceUploads(t, e, tok, []*Handler{e.h, second}, 50)
	if diff := cmp.Diff(map[int]int{201: 1, 409: 49}, codes); diff != "" {
		t.Errorf("statuses (-want +got):\n%s", diff)
	}
	a, err := st.GetArtifact(t.Context(), "wp-1", "result")
	if err != nil {
		t.Fatal(err)
	}
	rc, err := secondBlobs.Open(t.Context(), "wp-1", "result", a.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	served, _ := io.ReadAll(rc)
	rc.Close()
	if hexSHA(served) != a.SHA256 || int64(len(served)) != a.Size {
		t.Errorf("bytes served (%d, sha256 %s) differ from the record %+v", len(served), hexSHA(served), a)
	}
	raw, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var blobsLeft int
	var only string
	if err := raw.QueryRowContext(t.Context(), `SELECT count(*), coalesce(max(sha256), '') FROM artifact_blobs`).Scan(&blobsLeft, &only); err != nil {
		t.Fatal(err)
	}
	if blobsLeft != 1 || only != a.SHA256 {
		t.Errorf("%d blobs left (one %q), want only the recorded %s", blobsLeft, only, a.SHA256)
	}
	w := &recorder{header: http.Header{}}
	second.ServeHTTP(w, e.request(http.MethodPost, "/api/pods/wp-1/artifacts/result", tok, served))
	if w.code != http.StatusOK {
		t.Errorf("the recorded bytes again through the other replica: %d %s, want 200", w.code, w.body.String())
	}
}

package ingest

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"crucible.dev/crucible/internal/artifact"
	"crucible.dev/crucible/internal/artifact/pgblob"
	"crucible.dev/crucible/internal/store"
	"crucible.dev/crucible/internal/store/pgtest"
	"crucible.dev/crucible/internal/store/storetest"
)

// putLog records a controller log of size bytes for podID, as log
// collection does: with no bound of its own, but counted in the total.
func putLog(t *testing.T, st store.Store, podID string, size int64) {
	t.Helper()
	a := store.Artifact{PodID: podID, Kind: "log", Size: size, SHA256: hexSHA([]byte(podID)), Source: store.SourceController}
	if _, err := st.PutArtifact(t.Context(), a, store.Quota{}); err != nil {
		t.Fatal(err)
	}
}

// checkFull asserts a 507 with Retry-After 60 that left no file and no record.
func checkFull(t *testing.T, e *env, what string, w *httptest.ResponseRecorder, before []string, pod, kind string) {
	t.Helper()
	if w.Code != http.StatusInsufficientStorage || w.Header().Get("Retry-After") != "60" {
		t.Errorf("%s: status %d Retry-After %q, want 507 \"60\"", what, w.Code, w.Header().Get("Retry-After"))
	}
	if diff := cmp.Diff(before, e.files(pod)); diff != "" {
		t.Errorf("%s: files changed by a refused upload (-before +after):\n%s", what, diff)
	}
	if a, err := e.store.GetArtifact(t.Context(), pod, kind); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("%s: recorded %+v (%v)", what, a, err)
	}
}

// countingReader counts what the handler read of a body.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// TestTotalBytes: max_total_bytes bounds every pod's uploads and the
// collected logs together, refused before the body is read with a
// Content-Length, else cut as soon as the body passes what is left.
func TestTotalBytes(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.MaxTotalBytes = 100 })
	tok := e.addPod("wp-1", "uid-1")
	other := e.addPod("wp-2", "uid-2")
	putLog(t, e.store, "wp-2", 30)
	steps := []struct {
		name    string
		pod     string
		kind    string
		body    []byte
		chunked bool
		want    int
		maxRead int64 // of a refused body: none with a Content-Length, one byte past what is left without
	}{
		{"fits beside the log", "wp-1", "a", bytes.Repeat([]byte("a"), 60), false, 201, 60},
		{"past the total, by Content-Length", "wp-1", "b", bytes.Repeat([]byte("b"), 11), false, 507, 0},
		{"past the total, chunked", "wp-1", "b", bytes.Repeat([]byte("b"), 1000), true, 507, 11},
		{"another pod, exactly the total", "wp-2", "b", bytes.Repeat([]byte("c"), 10), true, 201, 10},
		{"empty at the total", "wp-1", "empty", nil, false, 201, 0},
		{"one byte, by Content-Length", "wp-1", "d", []byte("d"), false, 507, 0},
		{"one byte, chunked", "wp-1", "d", bytes.Repeat([]byte("d"), 1000), true, 507, 1},
		{"a recorded kind still answers", "wp-1", "a", bytes.Repeat([]byte("a"), 60), false, 200, 60},
	}
	tokens := map[string]string{"wp-1": tok, "wp-2": other}
	for _, st := range steps {
		before := e.files(st.pod)
		r := e.request(http.MethodPost, "/api/pods/"+st.pod+"/artifacts/"+st.kind, tokens[st.pod], st.body)
		body := &countingReader{r: r.Body}
		r.Body = io.NopCloser(body)
		if st.chunked {
			r.ContentLength = -1
		}
		w := e.serve(r)
		if st.want == 507 {
			checkFull(t, e, st.name, w, before, st.pod, st.kind)
		} else if w.Code != st.want {
			t.Errorf("%s: status %d, want %d", st.name, w.Code, st.want)
		}
		if body.n > st.maxRead {
			t.Errorf("%s: %d bytes of the body read, want at most %d", st.name, body.n, st.maxRead)
		}
	}
	if got, err := e.store.ArtifactBytes(t.Context()); err != nil || got != 100 {
		t.Errorf("total = %d, %v; want 100", got, err)
	}
}

// stageCounter counts the uploads that reached staging.
type stageCounter struct {
	Blobs
	stages int
}

func (s *stageCounter) Stage(ctx context.Context, podID, kind string, r io.Reader, limit int64) (artifact.Staged, error) {
	s.stages++
	return s.Blobs.Stage(ctx, podID, kind, r, limit)
}

// TestTotalBytesPastByLogs: logs are stored past the bound, after which
// nothing more of any pod is taken, not even an empty body, and nothing is
// staged to find that out.
func TestTotalBytesPastByLogs(t *testing.T) {
	blobs := &stageCounter{}
	e := newEnv(t, func(o *Options) { o.MaxTotalBytes, blobs.Blobs, o.Artifacts = 100, o.Artifacts, blobs })
	tok := e.addPod("wp-1", "uid-1")
	putLog(t, e.store, "wp-1", 101)
	for _, chunked := range []bool{false, true} {
		what := fmt.Sprintf("empty, chunked %v", chunked)
		before := e.files("wp-1")
		r := e.request(http.MethodPost, "/api/pods/wp-1/artifacts/empty", tok, nil)
		if chunked {
			r.ContentLength = -1
		}
		checkFull(t, e, what, e.serve(r), before, "wp-1", "empty")
		if blobs.stages != 0 {
			t.Errorf("%s: %d uploads staged, want none", what, blobs.stages)
		}
	}
}

// staleTotal answers ArtifactBytes with the total as it was before other
// replicas' claims landed, so the pre-check lets through uploads that only
// the claim can refuse.
type staleTotal struct {
	store.Store
	bytes int64
}

func (s staleTotal) ArtifactBytes(context.Context) (int64, error) { return s.bytes, nil }

// TestTotalBytesAtTheClaim: an upload the pre-check let through is refused
// by the store's claim when the total filled meanwhile: 507, and its
// committed file removed.
func TestTotalBytesAtTheClaim(t *testing.T) {
	var st store.Store
	e := newEnv(t, func(o *Options) {
		o.MaxTotalBytes = 100
		st = o.Store
		o.Store = staleTotal{Store: o.Store}
	})
	e.store = st
	tok := e.addPod("wp-1", "uid-1")
	putLog(t, st, "wp-1", 95)
	for i, chunked := range []bool{false, true} {
		before := e.files("wp-1")
		r := e.request(http.MethodPost, "/api/pods/wp-1/artifacts/result", tok, bytes.Repeat([]byte("r"), 6))
		if chunked {
			r.ContentLength = -1
		}
		w := e.serve(r)
		checkFull(t, e, fmt.Sprintf("chunked %v", chunked), w, before, "wp-1", "result")
		// The claim's refusal, logged as such (the pre-check words it otherwise).
		if n := strings.Count(e.logs.String(), "artifacts hold 95 bytes, 6 more would pass 100"); n != i+1 {
			t.Errorf("chunked %v: the claim's refusal logged %d times, want %d:\n%s", chunked, n, i+1, e.logs.String())
		}
	}
	if w := e.post("wp-1", "result", tok, bytes.Repeat([]byte("r"), 5)); w.Code != http.StatusCreated {
		t.Errorf("what fits: %d %s, want 201", w.Code, w.Body.String())
	}
}

// TestTotalBytesUnreadable: a total the store cannot read is 503, with
// nothing written.
func TestTotalBytesUnreadable(t *testing.T) {
	f := &storetest.Faulty{}
	e := newEnv(t, func(o *Options) { f.Store = o.Store; o.Store = f })
	tok := e.addPod("wp-1", "uid-1")
	f.Fail(errors.New("database down"), "ArtifactBytes")
	if w := e.post("wp-1", "result", tok, []byte("r")); w.Code != http.StatusServiceUnavailable {
		t.Errorf("status %d, want 503", w.Code)
	}
	if files := e.files("wp-1"); len(files) != 0 {
		t.Errorf("files %v written", files)
	}
}

// TestTotalBytesOnPostgres: 20 pods upload through two replicas at once
// into a total that holds 5 of them. Whichever check refuses them — the
// pre-check or the claim of a replica that saw room — exactly 5 are 201,
// the others 507, and the only blobs left are the recorded ones.
func TestTotalBytesOnPostgres(t *testing.T) {
	const pods, size, fit = 20, 10, 5
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
	e := newEnv(t, func(o *Options) { o.Store, o.Artifacts, o.MaxTotalBytes = st, blobs(), fit*size })
	e.store = st
	opts := e.h.opts.Options
	opts.Artifacts = blobs()
	second, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	handlers := []*Handler{e.h, second}
	tokens := make([]string, pods)
	for i := range pods {
		tokens[i] = e.addPod(fmt.Sprintf("wp-%02d", i), fmt.Sprintf("uid-%02d", i))
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		codes = map[int]int{}
	)
	for i := range pods {
		wg.Go(func() {
			r := e.request(http.MethodPost, fmt.Sprintf("/api/pods/wp-%02d/artifacts/result", i), tokens[i], bytes.Repeat([]byte{byte('a' + i)}, size))
			if i%2 == 1 {
				r.ContentLength = -1
			}
			w := &recorder{header: http.Header{}}
			handlers[i%2].ServeHTTP(w, r)
			mu.Lock()
			codes[w.code]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if diff := cmp.Diff(map[int]int{201: fit, 507: pods - fit}, codes); diff != "" {
		t.Errorf("statuses (-want +got):\n%s", diff)
	}
	raw, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var blobsLeft, recorded int
	if err := raw.QueryRowContext(t.Context(), `SELECT count(*) FROM artifact_blobs`).Scan(&blobsLeft); err != nil {
		t.Fatal(err)
	}
	if err := raw.QueryRowContext(t.Context(), `SELECT count(*) FROM artifacts a JOIN artifact_blobs b
		ON b.pod_id = a.pod_id AND b.kind = a.kind AND b.sha256 = a.sha256`).Scan(&recorded); err != nil {
		t.Fatal(err)
	}
	if blobsLeft != fit || recorded != fit {
		t.Errorf("%d blobs left, %d of them recorded; want only the %d recorded", blobsLeft, recorded, fit)
	}
	if got, err := st.ArtifactBytes(t.Context()); err != nil || got != fit*size {
		t.Errorf("total = %d, %v; want %d", got, err, fit*size)
	}
}

package ingest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/store"
)

func TestPodQuota(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.MaxKindsPerPod, o.MaxBytesPerPod = 3, 100 })
	tok := e.addPod("wp-1", "uid-1")
	other := e.addPod("wp-2", "uid-2")
	steps := []struct {
		name    string
		kind    string
		body    []byte
		chunked bool
		want    int
	}{
		{"first", "a", bytes.Repeat([]byte("a"), 60), false, 201},
		{"past the bytes, by Content-Length", "b", bytes.Repeat([]byte("b"), 41), false, 413},
		{"past the bytes, chunked", "b", bytes.Repeat([]byte("b"), 41), true, 413},
		{"exactly the bytes", "b", bytes.Repeat([]byte("b"), 40), false, 201},
		{"a recorded kind still answers: same", "a", bytes.Repeat([]byte("a"), 60), false, 200},
		{"a recorded kind still answers: other", "a", bytes.Repeat([]byte("x"), 60), false, 409},
		{"third kind, empty", "c", nil, false, 201},
		{"fourth kind", "d", nil, false, 413},
	}
	for _, st := range steps {
		before := e.files("wp-1")
		r := e.request(http.MethodPost, "/api/pods/wp-1/artifacts/"+st.kind, tok, st.body)
		if st.chunked {
			r.ContentLength = -1
		}
		w := e.serve(r)
		if w.Code != st.want {
			t.Errorf("%s: status %d, want %d", st.name, w.Code, st.want)
		}
		if st.want == 413 {
			if msg := errorBody(t, w.Body.Bytes()); msg == "" || !bytes.Contains([]byte(msg), []byte("quota")) {
				t.Errorf("%s: message %q does not say quota", st.name, msg)
			}
			if diff := cmp.Diff(before, e.files("wp-1")); diff != "" {
				t.Errorf("%s: files changed by a refused upload (-before +after):\n%s", st.name, diff)
			}
			if _, err := e.store.GetArtifact(t.Context(), "wp-1", st.kind); st.kind != "a" && !errors.Is(err, store.ErrNotFound) {
				t.Errorf("%s: recorded (%v)", st.name, err)
			}
		}
	}
	if w := e.post("wp-2", "a", other, bytes.Repeat([]byte("z"), 100)); w.Code != 201 {
		t.Errorf("another pod's quota: status %d, want 201", w.Code)
	}
}

func TestFreeSpaceFloor(t *testing.T) {
	free := uint64(2000)
	var statErr error
	e := newEnv(t, func(o *Options) {
		o.MinFreeBytes = 1000
		o.freeBytes = func() (uint64, error) { return free, statErr }
	})
	tok := e.addPod("wp-1", "uid-1")
	steps := []struct {
		name      string
		free      uint64
		statErr   error
		body      []byte
		chunked   bool
		want      int
		wantRetry string
	}{
		{"would cross the floor, by Content-Length", 2000, nil, make([]byte, 1001), false, 507, "60"},
		{"would cross the floor, chunked", 2000, nil, make([]byte, 1001), true, 507, "60"},
		{"already below the floor", 999, nil, []byte("x"), false, 507, "60"},
		{"statfs fails", 2000, errors.New("io error"), []byte("x"), false, 503, "5"},
		{"fits", 2000, nil, make([]byte, 1000), false, 201, ""},
	}
	for _, st := range steps {
		free, statErr = st.free, st.statErr
		before := e.files("wp-1")
		r := e.request(http.MethodPost, "/api/pods/wp-1/artifacts/result", tok, st.body)
		if st.chunked {
			r.ContentLength = -1
		}
		w := e.serve(r)
		if w.Code != st.want || w.Header().Get("Retry-After") != st.wantRetry {
			t.Errorf("%s: status %d Retry-After %q, want %d %q", st.name, w.Code, w.Header().Get("Retry-After"), st.want, st.wantRetry)
		}
		if st.want != 201 {
			if diff := cmp.Diff(before, e.files("wp-1")); diff != "" {
				t.Errorf("%s: files changed by a refused upload (-before +after):\n%s", st.name, diff)
			}
		}
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestStagingBoundedPerPod(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.MaxStagingPerPod = 1 })
	tok := e.addPod("wp-1", "uid-1")
	other := e.addPod("wp-2", "uid-2")
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		r := e.request(http.MethodPost, "/api/pods/wp-1/artifacts/slow", tok, nil)
		r.Body, r.ContentLength = pr, -1
		done <- e.serve(r).Code
	}()
	if _, err := pw.Write([]byte("partial")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first upload to stage", func() bool { return len(e.files("wp-1")) == 1 })

	w := e.post("wp-1", "second", tok, []byte("x"))
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "1" {
		t.Errorf("second upload while one stages: %d Retry-After %q, want 429 \"1\"", w.Code, w.Header().Get("Retry-After"))
	}
	if w := e.post("wp-2", "second", other, []byte("x")); w.Code != http.StatusCreated {
		t.Errorf("another pod meanwhile: %d, want 201", w.Code)
	}
	pw.Close()
	if code := <-done; code != http.StatusCreated {
		t.Errorf("first upload: %d, want 201", code)
	}
	if w := e.post("wp-1", "second", tok, []byte("x")); w.Code != http.StatusCreated {
		t.Errorf("second upload after the first: %d, want 201", w.Code)
	}
}

// TestUploadRate runs the handler behind a real server without a
// whole-request read timeout, as the external listener is, and with a write
// timeout shorter than the upload: a body that keeps the minimum rate may
// take many windows and still gets its answer; one that stalls or trickles
// below it is cut with 408 and the connection closed.
func TestUploadRate(t *testing.T) {
	const window = 250 * time.Millisecond
	e := newEnv(t, func(o *Options) { o.MinUploadRate, o.UploadRateWindow = 200, profile.Duration{Duration: window} }) // 50 bytes per window
	srv := httptest.NewUnstartedServer(e.h)
	srv.Config.ReadHeaderTimeout = 5 * time.Second
	srv.Config.WriteTimeout = 400 * time.Millisecond // runs from the headers; the honest upload takes longer
	srv.Start()
	t.Cleanup(srv.Close)
	tok := e.addPod("wp-1", "uid-1")

	upload := func(kind string, chunk []byte, chunks int, every time.Duration, stallAfter bool) *http.Response {
		t.Helper()
		pr, pw := io.Pipe()
		go func() {
			for range chunks {
				if _, err := pw.Write(chunk); err != nil {
					return
				}
				time.Sleep(every)
			}
			if !stallAfter {
				pw.Close()
			}
		}()
		t.Cleanup(func() { pw.Close() })
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second) // a client that is never cut fails here
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/api/pods/wp-1/artifacts/"+kind, pr)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		res.Body.Close()
		return res
	}

	// 40 bytes every 25 ms (1600 B/s) for 30 chunks: ~0.75 s, three windows.
	if res := upload("honest", bytes.Repeat([]byte("h"), 40), 30, 25*time.Millisecond, false); res.StatusCode != http.StatusCreated {
		t.Errorf("honest slow upload: %d, want 201", res.StatusCode)
	}
	a, err := e.store.GetArtifact(t.Context(), "wp-1", "honest")
	if err != nil || a.Size != 1200 {
		t.Errorf("honest upload recorded %+v, %v; want 1200 bytes", a, err)
	}
	for _, tc := range []struct {
		name   string
		chunk  []byte
		chunks int
		every  time.Duration
		stall  bool
	}{
		{"stalled", bytes.Repeat([]byte("s"), 60), 1, 0, true},
		{"trickling", []byte("tt"), 1000, 50 * time.Millisecond, true}, // 40 B/s
	} {
		res := upload(tc.name, tc.chunk, tc.chunks, tc.every, tc.stall)
		if res.StatusCode != http.StatusRequestTimeout || !res.Close {
			t.Errorf("%s: status %d close %v, want 408 and the connection closed", tc.name, res.StatusCode, res.Close)
		}
		if files := e.files("wp-1"); len(files) != 1 {
			t.Errorf("%s: files %v, want only the honest upload's", tc.name, files)
		}
	}
}

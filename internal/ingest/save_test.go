package ingest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"crucible.dev/crucible/internal/store"
)

func hexSHA(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// errorBody decodes a drop-box answer's "error".
func errorBody(t *testing.T, body []byte) string {
	t.Helper()
	var v struct{ Error string }
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	return v.Error
}

// TestReservedKinds: a pod's own valid token cannot upload a kind the
// controller owns (the reproduced attack: kind "log" → 201, and the real
// log was lost). The answer names the kind, costs no TokenReview and
// writes nothing.
func TestReservedKinds(t *testing.T) {
	e := newEnv(t)
	tok := e.addPod("wp-1", "uid-1")
	for _, kind := range []string{"log", "crucible-meta", "crucible-x1"} {
		w := e.post("wp-1", kind, tok, []byte("forged log"))
		if w.Code != http.StatusForbidden {
			t.Errorf("%s: status %d, want 403", kind, w.Code)
			continue
		}
		if msg := errorBody(t, w.Body.Bytes()); !strings.Contains(msg, fmt.Sprintf("%q", kind)) || !strings.Contains(msg, "reserved") {
			t.Errorf("%s: message %q does not name the reserved kind", kind, msg)
		}
		if _, err := e.store.GetArtifact(t.Context(), "wp-1", kind); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s: recorded (%v)", kind, err)
		}
	}
	if n := e.spoke.reviews.Load(); n != 0 {
		t.Errorf("TokenReviews = %d, want 0", n)
	}
	if files := e.files("wp-1"); len(files) != 0 {
		t.Errorf("files written: %v", files)
	}
	for _, kind := range []string{"logs", "x-log", "crucible", "crucibles-x"} {
		if w := e.post("wp-1", kind, tok, []byte(kind)); w.Code != http.StatusCreated {
			t.Errorf("%s: status %d, want 201", kind, w.Code)
		}
	}
}

// TestClosedRowsRefused: cancelled, lost and collected rows take no
// uploads, with every 403's body, before any TokenReview.
func TestClosedRowsRefused(t *testing.T) {
	e := newEnv(t)
	other := e.addPod("wp-x", "uid-x")
	unknown := e.post("wp-none", "result", other, []byte("x"))
	reviewsBefore := e.spoke.reviews.Load()
	closers := map[string]func(*store.WorkPod){
		"cancelled": func(p *store.WorkPod) { p.State = store.StateCancelled },
		"lost":      func(p *store.WorkPod) { p.State = store.StateLost },
		"collected": func(p *store.WorkPod) { p.State, p.LogCollected = store.StateSucceeded, true },
	}
	i := 0
	for name, close := range closers {
		i++
		pod, uid := fmt.Sprintf("wp-%d", i), fmt.Sprintf("uid-%d", i)
		tok := e.addPod(pod, uid)
		if _, err := e.store.UpdateWorkPod(t.Context(), pod, func(p *store.WorkPod) error { close(p); return nil }); err != nil {
			t.Fatal(err)
		}
		w := e.post(pod, "result", tok, []byte("late"))
		if w.Code != http.StatusForbidden {
			t.Errorf("%s: status %d, want 403", name, w.Code)
		}
		if diff := cmp.Diff(unknown.Body.String(), w.Body.String()); diff != "" {
			t.Errorf("%s: body differs from an unknown pod's 403 (-unknown +closed):\n%s", name, diff)
		}
		if _, err := e.store.GetArtifact(t.Context(), pod, "result"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s: recorded (%v)", name, err)
		}
	}
	if n := e.spoke.reviews.Load() - reviewsBefore; n != 0 {
		t.Errorf("TokenReviews for closed rows = %d, want 0", n)
	}
	if !strings.Contains(e.logs.String(), "reason=cancelled") {
		t.Errorf("the reason is not in the debug log:\n%s", e.logs.String())
	}
}

// TestForgetDropsCachedAccepts: after Forget a pod's token is reviewed
// again instead of being taken from the accept cache.
func TestForgetDropsCachedAccepts(t *testing.T) {
	e := newEnv(t)
	tok := e.addPod("wp-1", "uid-1")
	otherTok := e.addPod("wp-2", "uid-2")
	for i, kind := range []string{"a", "b"} {
		if w := e.post("wp-1", kind, tok, []byte(kind)); w.Code != http.StatusCreated {
			t.Fatalf("upload %s: %d", kind, w.Code)
		}
		if n := e.spoke.reviews.Load(); n != 1 {
			t.Fatalf("after upload %d: %d reviews, want 1 (cached)", i, n)
		}
	}
	e.post("wp-2", "a", otherTok, []byte("a"))
	e.h.Forget("wp-1")
	e.h.Forget("wp-unknown")
	if w := e.post("wp-1", "c", tok, []byte("c")); w.Code != http.StatusCreated {
		t.Fatalf("upload after Forget: %d", w.Code)
	}
	if n := e.spoke.reviews.Load(); n != 3 {
		t.Errorf("reviews = %d, want 3 (wp-1 reviewed again)", n)
	}
	e.post("wp-2", "b", otherTok, []byte("b"))
	if n := e.spoke.reviews.Load(); n != 3 {
		t.Errorf("reviews = %d, want 3 (wp-2's accept kept)", n)
	}
}

// raceUploads posts n different bodies of one kind at once, spread over
// handlers, and returns the statuses counted.
func raceUploads(t *testing.T, e *env, tok string, handlers []*Handler, n int) map[int]int {
	t.Helper()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		codes = map[int]int{}
	)
	for i := range n {
		wg.Go(func() {
			body := []byte(fmt.Sprintf("result of writer %02d", i))
			if i%5 == 0 {
				body = append(body, " (longer)"...) // some differ in length too
			}
			w := &recorder{header: http.Header{}}
			handlers[i%len(handlers)].ServeHTTP(w, e.request(http.MethodPost, "/api/pods/wp-1/artifacts/result", tok, body))
			mu.Lock()
			codes[w.code]++
			mu.Unlock()
		})
	}
	wg.Wait()
	return codes
}

// recorder is a minimal concurrent-safe ResponseWriter (one per request).
type recorder struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) Write(b []byte) (int, error) { return r.body.Write(b) }
func (r *recorder) WriteHeader(code int)        { r.code = code }

// checkOneRecorded asserts the record and the bytes served agree and that
// only the winner's file is left.
func checkOneRecorded(t *testing.T, e *env) {
	t.Helper()
	a, err := e.store.GetArtifact(t.Context(), "wp-1", "result")
	if err != nil {
		t.Fatal(err)
	}
	f, err := e.dir.Open(t.Context(), "wp-1", "result", a.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, _ := io.ReadAll(f)
	if hexSHA(b) != a.SHA256 || int64(len(b)) != a.Size {
		t.Errorf("bytes served (%d, sha256 %s) differ from the record %+v", len(b), hexSHA(b), a)
	}
	if diff := cmp.Diff([]string{"result." + a.SHA256}, e.files("wp-1")); diff != "" {
		t.Errorf("files (-want +got): losers' files or temp files left:\n%s", diff)
	}
}

func TestConcurrentDifferentBytesOneReplica(t *testing.T) {
	e := newEnv(t)
	tok := e.addPod("wp-1", "uid-1")
	codes := raceUploads(t, e, tok, []*Handler{e.h}, 50)
	if diff := cmp.Diff(map[int]int{201: 1, 409: 49}, codes); diff != "" {
		t.Errorf("statuses (-want +got):\n%s", diff)
	}
	checkOneRecorded(t, e)
}

// Two handlers on one store and one directory stand for two replicas: each
// has its own locks, so their uploads really race to the claim.
func TestConcurrentDifferentBytesTwoReplicas(t *testing.T) {
	e := newEnv(t)
	second, err := New(e.h.opts.Options)
	if err != nil {
		t.Fatal(err)
	}
	tok := e.addPod("wp-1", "uid-1")
	codes := raceUploads(t, e, tok, []*Handler{e.h, second}, 50)
	if diff := cmp.Diff(map[int]int{201: 1, 409: 49}, codes); diff != "" {
		t.Errorf("statuses (-want +got):\n%s", diff)
	}
	checkOneRecorded(t, e)
}

// watchedBody fails the test if it is read while a temp file exists in the
// pod's directory: proof that a recorded kind is compared without staging.
type watchedBody struct {
	t     *testing.T
	e     *env
	r     io.Reader
	reads int
}

func (b *watchedBody) Read(p []byte) (int, error) {
	b.reads++
	for _, f := range b.e.files("wp-1") {
		if strings.HasPrefix(f, ".") {
			b.t.Errorf("temp file %s while comparing with a record", f)
		}
	}
	return b.r.Read(p)
}

func TestRecordedKindAnsweredWithoutStaging(t *testing.T) {
	e := newEnv(t)
	tok := e.addPod("wp-1", "uid-1")
	stored := []byte("stored result")
	if w := e.post("wp-1", "result", tok, stored); w.Code != http.StatusCreated {
		t.Fatalf("first upload: %d", w.Code)
	}
	tests := []struct {
		name          string
		body          []byte
		contentLength int64 // -1: chunked
		want          int
		wantReads     bool
	}{
		{"other length", []byte("other"), 5, 409, false},
		{"same bytes", stored, int64(len(stored)), 200, true},
		{"same length, other bytes", []byte("STORED RESULT"), int64(len(stored)), 409, true},
		{"same bytes chunked", stored, -1, 200, true},
		{"longer chunked", append(append([]byte{}, stored...), 'x'), -1, 409, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := &watchedBody{t: t, e: e, r: bytes.NewReader(tc.body)}
			r := e.request(http.MethodPost, "/api/pods/wp-1/artifacts/result", tok, nil)
			r.Body, r.ContentLength = io.NopCloser(body), tc.contentLength
			if w := e.serve(r); w.Code != tc.want {
				t.Errorf("status %d, want %d", w.Code, tc.want)
			}
			if (body.reads > 0) != tc.wantReads {
				t.Errorf("body read %d times, want reads: %v", body.reads, tc.wantReads)
			}
		})
	}
	checkOneRecorded(t, e)
}

// Package blobtest is the conformance suite of artifact byte stores: the
// directory (artifact.Dir, with SQLite) and PostgreSQL (pgblob) pass the
// same tests, so the drop-box, the API and log collection behave the same
// on either (R-C10, R-IN6).
package blobtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"crucible.dev/crucible/internal/artifact"
)

// Blobs is what the suite exercises: what the users of artifact bytes call.
type Blobs interface {
	Stage(ctx context.Context, podID, kind string, r io.Reader, limit int64) (artifact.Staged, error)
	Write(ctx context.Context, podID, kind string, r io.Reader, limit int64) (artifact.Written, error)
	Open(ctx context.Context, podID, kind, digest string) (io.ReadCloser, error)
	Remove(ctx context.Context, podID, kind, digest string) error
}

// Run runs the suite; open returns a fresh, empty store for each test.
func Run(t *testing.T, open func(t *testing.T) Blobs) {
	tests := []struct {
		name string
		fn   func(t *testing.T, b Blobs)
	}{
		{"stage commit open", stageCommitOpen},
		{"staged is invisible and discard drops it", stagedInvisible},
		{"empty content", emptyContent},
		{"chunk boundaries", chunkBoundaries},
		{"too large stores nothing", tooLarge},
		{"failing reader stores nothing", failingReader},
		{"same bytes twice keep one address", sameBytesTwice},
		{"different bytes never overwrite", differentBytes},
		{"concurrent commits of the same bytes", concurrentSame},
		{"remove missing is no error", removeMissing},
		{"hostile names", hostileNames},
		{"64 MiB streamed with bounded memory", bigStreamed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open(t)) })
	}
}

func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// read returns the content at (pod, kind, digest).
func read(t *testing.T, b Blobs, pod, kind, sum string) string {
	t.Helper()
	rc, err := b.Open(t.Context(), pod, kind, sum)
	if err != nil {
		t.Fatalf("Open(%s, %s): %v", pod, kind, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read %s/%s: %v", pod, kind, err)
	}
	return string(data)
}

func notExist(t *testing.T, b Blobs, pod, kind, sum string) {
	t.Helper()
	rc, err := b.Open(t.Context(), pod, kind, sum)
	if err == nil {
		rc.Close()
		t.Fatalf("Open(%s, %s, %.8s): content visible, want fs.ErrNotExist", pod, kind, sum)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open(%s, %s, %.8s): %v, want fs.ErrNotExist", pod, kind, sum, err)
	}
}

func stageCommitOpen(t *testing.T, b Blobs) {
	s, err := b.Stage(t.Context(), "wp-1", "result", strings.NewReader("abc"), 10)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.Written(), (artifact.Written{Size: 3, SHA256: digest("abc")}); got != want {
		t.Errorf("Written() = %+v, want %+v", got, want)
	}
	if err := s.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	s.Discard() // a no-op after Commit
	if err := s.Commit(t.Context()); !errors.Is(err, artifact.ErrDone) {
		t.Errorf("second Commit: %v, want ErrDone", err)
	}
	if got := read(t, b, "wp-1", "result", digest("abc")); got != "abc" {
		t.Errorf("content = %q, want abc", got)
	}
	notExist(t, b, "wp-2", "result", digest("abc"))
	notExist(t, b, "wp-1", "other", digest("abc"))
}

func stagedInvisible(t *testing.T, b Blobs) {
	s, err := b.Stage(t.Context(), "wp-1", "result", strings.NewReader("abc"), 10)
	if err != nil {
		t.Fatal(err)
	}
	notExist(t, b, "wp-1", "result", digest("abc"))
	s.Discard()
	if err := s.Commit(t.Context()); !errors.Is(err, artifact.ErrDone) {
		t.Errorf("Commit after Discard: %v, want ErrDone", err)
	}
	notExist(t, b, "wp-1", "result", digest("abc"))
}

func emptyContent(t *testing.T, b Blobs) {
	w, err := b.Write(t.Context(), "wp-1", "empty", strings.NewReader(""), 10)
	if err != nil {
		t.Fatal(err)
	}
	if want := (artifact.Written{Size: 0, SHA256: digest("")}); w != want {
		t.Errorf("Written = %+v, want %+v", w, want)
	}
	if got := read(t, b, "wp-1", "empty", w.SHA256); got != "" {
		t.Errorf("content = %q, want empty", got)
	}
}

// chunkBoundaries writes contents around PostgreSQL's 1 MiB chunk.
func chunkBoundaries(t *testing.T, b Blobs) {
	for _, n := range []int{1<<20 - 1, 1 << 20, 1<<20 + 1, 3<<20 + 7} {
		content := pattern(n)
		kind := fmt.Sprintf("k%d", n)
		w, err := b.Write(t.Context(), "wp-1", kind, strings.NewReader(content), 4<<20)
		if err != nil {
			t.Fatalf("Write %d bytes: %v", n, err)
		}
		if w.Size != int64(n) || w.SHA256 != digest(content) {
			t.Errorf("Write %d bytes: %+v", n, w)
		}
		if got := read(t, b, "wp-1", kind, w.SHA256); got != content {
			t.Errorf("%d bytes read back as %d bytes (or different)", n, len(got))
		}
	}
}

func pattern(n int) string {
	var sb strings.Builder
	for i := 0; sb.Len() < n; i++ {
		fmt.Fprintf(&sb, "%08d\n", i)
	}
	return sb.String()[:n]
}

func tooLarge(t *testing.T, b Blobs) {
	content := strings.Repeat("x", 11)
	if _, err := b.Stage(t.Context(), "wp-1", "result", strings.NewReader(content), 10); !errors.Is(err, artifact.ErrTooLarge) {
		t.Fatalf("Stage of 11 bytes with limit 10: %v, want ErrTooLarge", err)
	}
	notExist(t, b, "wp-1", "result", digest(content))
	notExist(t, b, "wp-1", "result", digest(content[:10]))
}

// errAfter yields n bytes, then fails, as a client that hangs up does.
type errAfter struct{ n int }

var errHangUp = errors.New("client hung up")

func (e *errAfter) Read(p []byte) (int, error) {
	if e.n == 0 {
		return 0, errHangUp
	}
	k := min(len(p), e.n)
	for i := range k {
		p[i] = 'y'
	}
	e.n -= k
	return k, nil
}

func failingReader(t *testing.T, b Blobs) {
	_, err := b.Stage(t.Context(), "wp-1", "result", &errAfter{n: 1<<20 + 5}, 8<<20)
	if !errors.Is(err, errHangUp) {
		t.Fatalf("Stage of a failing body: %v, want the reader's error", err)
	}
	// What was read so far is nowhere to be found.
	notExist(t, b, "wp-1", "result", digest(strings.Repeat("y", 1<<20+5)))
	notExist(t, b, "wp-1", "result", digest(strings.Repeat("y", 1<<20)))
}

func sameBytesTwice(t *testing.T, b Blobs) {
	for range 2 {
		if _, err := b.Write(t.Context(), "wp-1", "result", strings.NewReader("same"), 10); err != nil {
			t.Fatal(err)
		}
	}
	if got := read(t, b, "wp-1", "result", digest("same")); got != "same" {
		t.Errorf("content = %q", got)
	}
	// One address, one content: removing it removes it.
	if err := b.Remove(t.Context(), "wp-1", "result", digest("same")); err != nil {
		t.Fatal(err)
	}
	notExist(t, b, "wp-1", "result", digest("same"))
}

// differentBytes: two writers of one kind end at two addresses, and the
// loser removing its own leaves the winner's untouched.
func differentBytes(t *testing.T, b Blobs) {
	keep, err := b.Write(t.Context(), "wp-1", "result", strings.NewReader("keep"), 10)
	if err != nil {
		t.Fatal(err)
	}
	lose, err := b.Write(t.Context(), "wp-1", "result", strings.NewReader("lose"), 10)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Remove(t.Context(), "wp-1", "result", lose.SHA256); err != nil {
		t.Fatal(err)
	}
	notExist(t, b, "wp-1", "result", lose.SHA256)
	if got := read(t, b, "wp-1", "result", keep.SHA256); got != "keep" {
		t.Errorf("winner's content = %q after the loser's Remove", got)
	}
}

func concurrentSame(t *testing.T, b Blobs) {
	content := pattern(1<<20 + 100)
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Go(func() {
			s, err := b.Stage(t.Context(), "wp-1", "result", strings.NewReader(content), 2<<20)
			if err != nil {
				errs[i] = err
				return
			}
			defer s.Discard()
			errs[i] = s.Commit(t.Context())
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent commits: %v", err)
	}
	if got := read(t, b, "wp-1", "result", digest(content)); got != content {
		t.Errorf("content after concurrent commits differs (%d bytes)", len(got))
	}
}

func removeMissing(t *testing.T, b Blobs) {
	if err := b.Remove(t.Context(), "wp-9", "result", digest("never")); err != nil {
		t.Errorf("Remove of missing content: %v", err)
	}
}

func hostileNames(t *testing.T, b Blobs) {
	sum := digest("x")
	for _, name := range []string{"", "..", "../etc", "a/b", "UPPER", "a\x00b", strings.Repeat("a", 64), "-a", "a.b"} {
		if _, err := b.Stage(t.Context(), name, "log", strings.NewReader("x"), 10); !errors.Is(err, artifact.ErrInvalidName) {
			t.Errorf("Stage(pod %q): %v, want ErrInvalidName", name, err)
		}
		if _, err := b.Stage(t.Context(), "wp-1", name, strings.NewReader("x"), 10); !errors.Is(err, artifact.ErrInvalidName) {
			t.Errorf("Stage(kind %q): %v, want ErrInvalidName", name, err)
		}
		if _, err := b.Open(t.Context(), name, "log", sum); !errors.Is(err, artifact.ErrInvalidName) {
			t.Errorf("Open(pod %q): %v, want ErrInvalidName", name, err)
		}
		if err := b.Remove(t.Context(), "wp-1", name, sum); !errors.Is(err, artifact.ErrInvalidName) {
			t.Errorf("Remove(kind %q): %v, want ErrInvalidName", name, err)
		}
	}
	for _, d := range []string{"", "abc", strings.ToUpper(sum), sum + "0", "../" + sum[3:], strings.Repeat("g", 64)} {
		if _, err := b.Open(t.Context(), "wp-1", "log", d); !errors.Is(err, artifact.ErrInvalidName) {
			t.Errorf("Open(digest %q): %v, want ErrInvalidName", d, err)
		}
		if err := b.Remove(t.Context(), "wp-1", "log", d); !errors.Is(err, artifact.ErrInvalidName) {
			t.Errorf("Remove(digest %q): %v, want ErrInvalidName", d, err)
		}
	}
}

// BigSize is the artifact of the bounded-memory test, and MaxHeapGrowth
// the heap it may add while one is staged, committed and read back: half
// of it, so that holding the artifact whole fails the test. The bound is
// generous because HeapInuse counts garbage until the GC runs, and the
// PostgreSQL driver allocates about one fresh chunk-sized buffer per chunk
// it sends or receives (measured: ~15 MiB peak for pgblob, <1 MiB for Dir).
const (
	BigSize       = 64 << 20
	MaxHeapGrowth = BigSize / 2
)

// bigStreamed stages, commits and reads back BigSize bytes from a
// generator, never as a whole, and watches the heap meanwhile.
func bigStreamed(t *testing.T, b Blobs) {
	if testing.Short() {
		t.Skip("64 MiB artifact skipped in -short mode")
	}
	src := rand.New(rand.NewPCG(1, 2))
	gen := io.LimitReader(readerFunc(func(p []byte) (int, error) {
		for i := range p {
			p[i] = byte(src.Uint32())
		}
		return len(p), nil
	}), BigSize)
	peak := watchHeap(t)

	w, err := b.Write(t.Context(), "wp-big", "result", gen, BigSize)
	if err != nil {
		t.Fatal(err)
	}
	if w.Size != BigSize {
		t.Fatalf("Written.Size = %d, want %d", w.Size, BigSize)
	}
	rc, err := b.Open(t.Context(), "wp-big", "result", w.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	n, err := io.Copy(h, rc)
	rc.Close()
	if err != nil || n != BigSize {
		t.Fatalf("read back %d bytes, %v; want %d", n, err, BigSize)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != w.SHA256 {
		t.Errorf("read back sha256 %s, want %s", got, w.SHA256)
	}
	if grew := peak(); grew > MaxHeapGrowth {
		t.Errorf("heap in use grew by %d MiB while streaming %d MiB; want at most %d MiB (never the whole artifact in memory)",
			grew>>20, BigSize>>20, MaxHeapGrowth>>20)
	} else {
		t.Logf("heap in use grew by at most %.1f MiB streaming %d MiB", float64(grew)/(1<<20), BigSize>>20)
	}
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// watchHeap samples HeapInuse until the returned function is called, which
// returns the largest growth over the baseline taken after a GC.
func watchHeap(t *testing.T) func() int64 {
	t.Helper()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := int64(ms.HeapInuse)
	stop := make(chan struct{})
	done := make(chan int64)
	go func() {
		var peak int64
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			peak = max(peak, int64(ms.HeapInuse)-base)
			select {
			case <-stop:
				done <- peak
				return
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	var peak int64
	finish := func() int64 {
		once.Do(func() { close(stop); peak = <-done })
		return peak
	}
	t.Cleanup(func() { finish() })
	return finish
}

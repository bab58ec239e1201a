package artifact

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// names lists dir's entries (nil when it does not exist).
func names(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

func read(t *testing.T, d Dir, pod, kind, sum string) string {
	t.Helper()
	f, err := d.Open(t.Context(), pod, kind, sum)
	if err != nil {
		t.Fatalf("open %s/%s@%s: %v", pod, kind, sum, err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestWriteIsAtomicAndHashed(t *testing.T) {
	d := Dir{Root: t.TempDir()}
	content := "line one\nline two\n"
	w, err := d.Write(t.Context(), "wp-1", "log", strings.NewReader(content), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Written{Size: int64(len(content)), SHA256: digest(content)}); w != want {
		t.Errorf("written = %+v, want %+v", w, want)
	}
	if got := read(t, d, "wp-1", "log", w.SHA256); got != content {
		t.Errorf("read %q", got)
	}
	if diff := cmp.Diff([]string{"log." + w.SHA256}, names(t, filepath.Join(d.Root, "wp-1"))); diff != "" {
		t.Errorf("dir (-want +got), only the content-addressed file:\n%s", diff)
	}
}

// Two contents of one (pod, kind) never share a file: each stays readable
// under its own digest, whatever order they were committed in.
func TestDifferentContentNeverOverwrites(t *testing.T) {
	d := Dir{Root: t.TempDir()}
	const writers = 20
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for i := range writers {
		wg.Go(func() {
			if _, err := d.Write(t.Context(), "wp-1", "result", strings.NewReader(fmt.Sprintf("content %d", i)), 100); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := range writers {
		c := fmt.Sprintf("content %d", i)
		if got := read(t, d, "wp-1", "result", digest(c)); got != c {
			t.Errorf("file of %q holds %q", c, got)
		}
	}
	if n := len(names(t, filepath.Join(d.Root, "wp-1"))); n != writers {
		t.Errorf("%d files, want %d (no temp files, one per content)", n, writers)
	}
	// The same content again lands on the same name with the same bytes.
	if _, err := d.Write(t.Context(), "wp-1", "result", strings.NewReader("content 3"), 100); err != nil {
		t.Fatal(err)
	}
	if got := read(t, d, "wp-1", "result", digest("content 3")); got != "content 3" {
		t.Errorf("rewrite changed the bytes: %q", got)
	}
}

func TestTooLargeWritesNothing(t *testing.T) {
	d := Dir{Root: t.TempDir()}
	w, err := d.Write(t.Context(), "wp-1", "log", strings.NewReader("old"), 10)
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.Write(t.Context(), "wp-1", "log", strings.NewReader(strings.Repeat("x", 11)), 10)
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err = %v, want ErrTooLarge", err)
	}
	if got := read(t, d, "wp-1", "log", w.SHA256); got != "old" {
		t.Errorf("artifact = %q after a rejected write, want the old content", got)
	}
	if diff := cmp.Diff([]string{"log." + w.SHA256}, names(t, filepath.Join(d.Root, "wp-1"))); diff != "" {
		t.Errorf("temp file left behind (-want +got):\n%s", diff)
	}
}

func TestStageCommitDiscard(t *testing.T) {
	d := Dir{Root: t.TempDir()}
	entries := func() []string { return names(t, filepath.Join(d.Root, "wp-1")) }
	sum := digest("abc")

	s, err := d.Stage(t.Context(), "wp-1", "result", strings.NewReader("abc"), 10)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.Written(), (Written{Size: 3, SHA256: sum}); got != want {
		t.Errorf("Written() = %+v, want %+v", got, want)
	}
	if _, err := d.Open(t.Context(), "wp-1", "result", sum); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("staged content visible before Commit: err = %v", err)
	}
	if got := entries(); len(got) != 1 || !isTemp(got[0]) {
		t.Errorf("while staged the dir holds %v, want one temp file", got)
	}
	s.Discard()
	if got := entries(); len(got) != 0 {
		t.Errorf("after Discard the dir holds %v, want nothing", got)
	}

	s, err = d.Stage(t.Context(), "wp-1", "result", strings.NewReader("abc"), 10)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	s.Discard() // no-op after Commit
	if err := s.Commit(t.Context()); err == nil {
		t.Error("second Commit succeeded")
	}
	if diff := cmp.Diff([]string{"result." + sum}, entries()); diff != "" {
		t.Errorf("after Commit (-want +got):\n%s", diff)
	}
	if got := read(t, d, "wp-1", "result", sum); got != "abc" {
		t.Errorf("committed content = %q", got)
	}
	if _, err := d.Stage(t.Context(), "wp-1", "other", strings.NewReader("12345678901"), 10); !errors.Is(err, ErrTooLarge) {
		t.Errorf("oversized Stage: err = %v, want ErrTooLarge", err)
	}
	if got := entries(); len(got) != 1 {
		t.Errorf("oversized Stage left %v behind", got)
	}
}

func TestRemove(t *testing.T) {
	d := Dir{Root: t.TempDir()}
	keep, _ := d.Write(t.Context(), "wp-1", "result", strings.NewReader("keep"), 10)
	lose, _ := d.Write(t.Context(), "wp-1", "result", strings.NewReader("lose"), 10)
	if err := d.Remove(t.Context(), "wp-1", "result", lose.SHA256); err != nil {
		t.Fatal(err)
	}
	if err := d.Remove(t.Context(), "wp-1", "result", lose.SHA256); err != nil {
		t.Errorf("removing a missing file: %v", err)
	}
	if diff := cmp.Diff([]string{"result." + keep.SHA256}, names(t, filepath.Join(d.Root, "wp-1"))); diff != "" {
		t.Errorf("after Remove (-want +got):\n%s", diff)
	}
}

// A record written before content addressing names a file <pod>/<kind>.
func TestOpenLegacyFile(t *testing.T) {
	d := Dir{Root: t.TempDir()}
	if err := os.MkdirAll(filepath.Join(d.Root, "wp-1"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.Root, "wp-1", "log"), []byte("legacy"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := read(t, d, "wp-1", "log", digest("legacy")); got != "legacy" {
		t.Errorf("legacy read %q", got)
	}
	if _, err := d.Open(t.Context(), "wp-1", "other", digest("x")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("open of nothing: err = %v, want ErrNotExist", err)
	}
	// A content-addressed file wins over the legacy one.
	w, _ := d.Write(t.Context(), "wp-1", "log", strings.NewReader("new"), 10)
	if got := read(t, d, "wp-1", "log", w.SHA256); got != "new" {
		t.Errorf("read %q, want the content-addressed file", got)
	}
}

func TestCleanTemp(t *testing.T) {
	d := Dir{Root: filepath.Join(t.TempDir(), "artifacts")}
	if n, err := d.CleanTemp(); n != 0 || err != nil {
		t.Errorf("missing root: %d, %v; want 0, nil", n, err)
	}
	w, _ := d.Write(t.Context(), "wp-1", "result", strings.NewReader("kept"), 10)
	for _, p := range []string{"wp-1/.result.tmp-123", "wp-1/.log.tmp-9", "wp-2/.x.tmp-1"} {
		if err := os.MkdirAll(filepath.Join(d.Root, filepath.Dir(p)), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d.Root, p), []byte("crash"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(d.Root, "wp-1", "log"), []byte("legacy"), 0o600); err != nil {
		t.Fatal(err)
	}
	n, err := d.CleanTemp()
	if n != 3 || err != nil {
		t.Errorf("CleanTemp = %d, %v; want 3, nil", n, err)
	}
	got := append(names(t, filepath.Join(d.Root, "wp-1")), names(t, filepath.Join(d.Root, "wp-2"))...)
	slices.Sort(got)
	if diff := cmp.Diff([]string{"log", "result." + w.SHA256}, got); diff != "" {
		t.Errorf("left (-want +got):\n%s", diff)
	}
}

func TestDigest(t *testing.T) {
	w, err := Digest(strings.NewReader("abc"), 3)
	if err != nil || w != (Written{Size: 3, SHA256: digest("abc")}) {
		t.Errorf("Digest = %+v, %v", w, err)
	}
	if _, err := Digest(strings.NewReader("abcd"), 3); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Digest over the limit: err = %v, want ErrTooLarge", err)
	}
}

func TestFreeBytes(t *testing.T) {
	d := Dir{Root: filepath.Join(t.TempDir(), "new", "artifacts")}
	free, err := d.FreeBytes()
	if err != nil || free == 0 {
		t.Errorf("FreeBytes = %d, %v; want > 0, nil", free, err)
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := (Dir{Root: filepath.Join(file, "sub")}).FreeBytes(); err == nil {
		t.Error("FreeBytes under a regular file: nil error")
	}
}

func TestHostileNames(t *testing.T) {
	d := Dir{Root: t.TempDir()}
	for _, name := range []string{"", "..", "../x", "a/b", "A", "x\x00", "log\n", strings.Repeat("a", 64), "-a", "a."} {
		if _, err := d.Write(t.Context(), name, "log", strings.NewReader("x"), 10); !errors.Is(err, ErrInvalidName) {
			t.Errorf("pod %q: err = %v, want ErrInvalidName", name, err)
		}
		if _, err := d.Write(t.Context(), "wp-1", name, strings.NewReader("x"), 10); !errors.Is(err, ErrInvalidName) {
			t.Errorf("kind %q: err = %v, want ErrInvalidName", name, err)
		}
	}
	for _, sum := range []string{"", "..", "../../etc/passwd", strings.ToUpper(digest("x")), digest("x")[:63], digest("x") + "0", "/" + digest("x")[1:]} {
		if _, err := d.Open(t.Context(), "wp-1", "log", sum); !errors.Is(err, ErrInvalidName) {
			t.Errorf("open digest %q: err = %v, want ErrInvalidName", sum, err)
		}
		if err := d.Remove(t.Context(), "wp-1", "log", sum); !errors.Is(err, ErrInvalidName) {
			t.Errorf("remove digest %q: err = %v, want ErrInvalidName", sum, err)
		}
	}
}

func FuzzValidName(f *testing.F) {
	for _, s := range []string{"log", "wp-1", "..", "a/b", "", "A"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if ValidName(s) && (strings.ContainsAny(s, "/\\.\x00") || s == "" || strings.ToLower(s) != s) {
			t.Errorf("ValidName(%q) = true", s)
		}
	})
}

func TestReserved(t *testing.T) {
	for kind, want := range map[string]bool{
		"log": true, "crucible-": true, "crucible-meta": true,
		"logs": false, "x-log": false, "crucible": false, "result": false, "crucibles-x": false,
	} {
		if got := Reserved(kind); got != want {
			t.Errorf("Reserved(%q) = %v, want %v", kind, got, want)
		}
	}
}

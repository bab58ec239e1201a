package artifact

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteIsAtomicAndHashed(t *testing.T) {
	d := Dir{Root: t.TempDir()}
	content := "line one\nline two\n"
	w, err := d.Write("wp-1", "log", strings.NewReader(content), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(content))
	if w.Size != int64(len(content)) || w.SHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("written = %+v", w)
	}
	f, err := d.Open("wp-1", "log")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(f)
	f.Close()
	if string(got) != content {
		t.Errorf("read %q", got)
	}
	entries, _ := os.ReadDir(filepath.Join(d.Root, "wp-1"))
	if len(entries) != 1 {
		t.Errorf("dir has %d entries, want only the artifact (no temp files)", len(entries))
	}
}

func TestTooLargeWritesNothing(t *testing.T) {
	d := Dir{Root: t.TempDir()}
	if _, err := d.Write("wp-1", "log", strings.NewReader("old"), 10); err != nil {
		t.Fatal(err)
	}
	_, err := d.Write("wp-1", "log", strings.NewReader(strings.Repeat("x", 11)), 10)
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err = %v, want ErrTooLarge", err)
	}
	f, _ := d.Open("wp-1", "log")
	got, _ := io.ReadAll(f)
	f.Close()
	if string(got) != "old" {
		t.Errorf("artifact = %q after a rejected write, want the old content", got)
	}
	entries, _ := os.ReadDir(filepath.Join(d.Root, "wp-1"))
	if len(entries) != 1 {
		t.Errorf("temp file left behind: %v", entries)
	}
}

func TestStageCommitDiscard(t *testing.T) {
	d := Dir{Root: t.TempDir()}
	entries := func() []string {
		t.Helper()
		es, err := os.ReadDir(filepath.Join(d.Root, "wp-1"))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range es {
			names = append(names, e.Name())
		}
		return names
	}

	s, err := d.Stage("wp-1", "result", strings.NewReader("abc"), 10)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("abc"))
	if got, want := s.Written(), (Written{Size: 3, SHA256: hex.EncodeToString(sum[:])}); got != want {
		t.Errorf("Written() = %+v, want %+v", got, want)
	}
	if _, err := d.Open("wp-1", "result"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("staged content visible before Commit: err = %v", err)
	}
	s.Discard()
	if got := entries(); len(got) != 0 {
		t.Errorf("after Discard the dir holds %v, want nothing", got)
	}

	s, err = d.Stage("wp-1", "result", strings.NewReader("abc"), 10)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(); err != nil {
		t.Fatal(err)
	}
	s.Discard() // no-op after Commit
	if err := s.Commit(); err == nil {
		t.Error("second Commit succeeded")
	}
	if got := entries(); len(got) != 1 || got[0] != "result" {
		t.Errorf("after Commit the dir holds %v, want [result]", got)
	}
	f, err := d.Open("wp-1", "result")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(f)
	f.Close()
	if string(got) != "abc" {
		t.Errorf("committed content = %q", got)
	}

	if _, err := d.Stage("wp-1", "other", strings.NewReader("12345678901"), 10); !errors.Is(err, ErrTooLarge) {
		t.Errorf("oversized Stage: err = %v, want ErrTooLarge", err)
	}
	if got := entries(); len(got) != 1 {
		t.Errorf("oversized Stage left %v behind", got)
	}
}

func TestHostileNames(t *testing.T) {
	d := Dir{Root: t.TempDir()}
	for _, name := range []string{"", "..", "../x", "a/b", "A", "x\x00", "log\n", strings.Repeat("a", 64), "-a", "a."} {
		if _, err := d.Write(name, "log", strings.NewReader("x"), 10); !errors.Is(err, ErrInvalidName) {
			t.Errorf("pod %q: err = %v, want ErrInvalidName", name, err)
		}
		if _, err := d.Write("wp-1", name, strings.NewReader("x"), 10); !errors.Is(err, ErrInvalidName) {
			t.Errorf("kind %q: err = %v, want ErrInvalidName", name, err)
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

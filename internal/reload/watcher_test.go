package reload

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"crucible.dev/crucible/internal/metrics"
)

// file writes a file with strictly increasing modification times, so a
// poll sees every write whatever the file system's clock granularity.
type file struct {
	path  string
	mtime time.Time
}

func (f *file) write(t *testing.T, content string) {
	t.Helper()
	if err := os.WriteFile(f.path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	f.mtime = f.mtime.Add(time.Second)
	if err := os.Chtimes(f.path, f.mtime, f.mtime); err != nil {
		t.Fatal(err)
	}
}

// recorder is an Apply that records what it was given and answers with
// the error its content names: "bad" invalid, "restart" restart needed.
type recorder struct{ applied []string }

func (r *recorder) apply(_ context.Context, data []byte) (bool, error) {
	r.applied = append(r.applied, string(data))
	switch string(data) {
	case "bad":
		return false, errors.New("does not parse")
	case "restart":
		return false, fmt.Errorf("key x: %w", ErrRestartNeeded)
	}
	return string(data) != "same", nil
}

func counts(component string) map[Outcome]float64 {
	got := map[Outcome]float64{}
	for _, o := range []Outcome{Applied, Unchanged, Invalid, RestartNeeded} {
		if n := testutil.ToFloat64(metrics.ConfigReloads.WithLabelValues(component, string(o))); n > 0 {
			got[o] = n
		}
	}
	return got
}

func TestCheck(t *testing.T) {
	f := &file{path: filepath.Join(t.TempDir(), "config"), mtime: time.Now()}
	f.write(t, "a")
	rec := &recorder{}
	var reported []Outcome
	w := &Watcher{Component: t.Name(), Path: f.path, Interval: time.Hour, MaxBytes: 8, Apply: rec.apply,
		Report: func(o Outcome, _ error) { reported = append(reported, o) }}
	w.Current = [32]byte{1} // not the file's: the first check applies it

	steps := []struct {
		write  string // "" leaves the file; "-" removes it
		forced bool
	}{
		{"", false},        // a: applied
		{"", false},        // nothing moved
		{"a", false},       // rewritten with the same content: not applied again
		{"bad", false},     // invalid
		{"", false},        // the refused content is not retried
		{"", true},         // unless asked: invalid again
		{"restart", false}, // restart_needed
		{"-", false},       // unreadable: invalid, once
		{"", false},        //
		{"same", false},    // back, and what runs already: unchanged
		{"", true},         // asked: applied whatever it holds, unchanged
		{"123456789", false},
	}
	for _, s := range steps {
		switch s.write {
		case "":
		case "-":
			if err := os.Remove(f.path); err != nil {
				t.Fatal(err)
			}
		default:
			f.write(t, s.write)
		}
		w.check(t.Context(), s.forced)
	}
	wantApplied := []string{"a", "bad", "bad", "restart", "same", "same", "123456789"}
	if diff := cmp.Diff(wantApplied, rec.applied); diff != "" {
		t.Errorf("Apply saw (-want +got):\n%s", diff)
	}
	wantReported := []Outcome{Applied, Invalid, Invalid, RestartNeeded, Invalid, Unchanged, Unchanged, Applied}
	if diff := cmp.Diff(wantReported, reported); diff != "" {
		t.Errorf("reported (-want +got):\n%s", diff)
	}
	want := map[Outcome]float64{Applied: 2, Invalid: 3, RestartNeeded: 1, Unchanged: 2}
	if diff := cmp.Diff(want, counts(t.Name())); diff != "" {
		t.Errorf("crucible_config_reloads_total (-want +got):\n%s", diff)
	}
}

func TestReadFileBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(path, []byte("0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	if data, err := ReadFile(path, 4); err != nil || string(data) != "01234" {
		t.Errorf("ReadFile(10 bytes, limit 4) = %q, %v; want the limit and one byte more", data, err)
	}
}

// TestStartReloadsOnSignal: a signal applies the file at once, though
// unchanged and long before the next poll; the file Start begins with is
// not applied.
func TestStartReloadsOnSignal(t *testing.T) {
	f := &file{path: filepath.Join(t.TempDir(), "config"), mtime: time.Now()}
	f.write(t, "a")
	applied := make(chan string)
	hup := make(chan os.Signal)
	w := &Watcher{Component: t.Name(), Path: f.path, Interval: time.Hour, MaxBytes: 8, Signals: hup,
		Apply: func(_ context.Context, data []byte) (bool, error) {
			applied <- string(data)
			return false, nil
		}}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Start(ctx) }()

	hup <- syscall.SIGHUP // taken only once Start runs its loop
	select {
	case got := <-applied:
		if got != "a" {
			t.Errorf("a signal applied %q, want %q", got, "a")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a signal applied nothing within 5s")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Start returned %v, want nil on cancel", err)
	}
}

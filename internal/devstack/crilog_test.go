package devstack

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// fakeClock hands out times one second apart from a fixed start.
func fakeClock() func() time.Time {
	var mu sync.Mutex
	t := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		t = t.Add(time.Second)
		return t
	}
}

func newTestLog(t *testing.T) *criLog {
	t.Helper()
	l, err := newCRILog(filepath.Join(t.TempDir(), "c.log"))
	if err != nil {
		t.Fatal(err)
	}
	l.now = fakeClock()
	return l
}

// writeAll copies stdout and stderr into l and waits until both are done.
func writeAll(l *criLog, stdout, stderr string) {
	l.expect(2)
	var wg sync.WaitGroup
	wg.Go(func() { l.copy("stdout", strings.NewReader(stdout)) })
	wg.Wait() // one after the other: the record order is then fixed
	wg.Go(func() { l.copy("stderr", strings.NewReader(stderr)) })
	wg.Wait()
}

func serveString(t *testing.T, l *criLog, o logOptions) string {
	t.Helper()
	var b bytes.Buffer
	if err := l.serve(t.Context(), &b, func() {}, o); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestCRILogRecordsAndServes(t *testing.T) {
	l := newTestLog(t)
	long := strings.Repeat("x", maxRecord+10)
	writeAll(l, "hello\n\nno newline at the end", long+"\n")
	data, err := os.ReadFile(l.path)
	if err != nil {
		t.Fatal(err)
	}
	want := "2026-01-01T00:00:01Z stdout F hello\n" +
		"2026-01-01T00:00:02Z stdout F \n" +
		"2026-01-01T00:00:03Z stdout P no newline at the end\n" +
		"2026-01-01T00:00:04Z stderr P " + strings.Repeat("x", maxRecord) + "\n" +
		"2026-01-01T00:00:05Z stderr F " + strings.Repeat("x", 10) + "\n"
	if diff := cmp.Diff(want, string(data)); diff != "" {
		t.Errorf("log file (-want +got):\n%s", diff)
	}

	tests := []struct {
		name string
		o    logOptions
		want string
	}{
		{"all", logOptions{tailLines: -1}, "hello\n\nno newline at the end" + long + "\n"},
		{"timestamps once per line", logOptions{tailLines: -1, timestamps: true},
			"2026-01-01T00:00:01Z hello\n2026-01-01T00:00:02Z \n2026-01-01T00:00:03Z no newline at the end" + long + "\n"},
		{"since", logOptions{tailLines: -1, since: time.Date(2026, 1, 1, 0, 0, 2, 0, time.UTC)}, "\nno newline at the end" + long + "\n"},
		{"tail 1", logOptions{tailLines: 1}, "no newline at the end" + long + "\n"},
		{"tail 2", logOptions{tailLines: 2}, "\nno newline at the end" + long + "\n"},
		{"tail 0", logOptions{tailLines: 0}, ""},
		{"tail more than there are", logOptions{tailLines: 99}, "hello\n\nno newline at the end" + long + "\n"},
		{"limit", logOptions{tailLines: -1, limitBytes: 8}, "hello\n\nn"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, serveString(t, l, tt.o)); diff != "" {
				t.Errorf("served (-want +got):\n%s", diff)
			}
		})
	}
}

// Lines that are not CRI records (a corrupt or hostile file) are skipped, as
// the kubelet skips them.
func TestCRILogSkipsMalformedRecords(t *testing.T) {
	l := newTestLog(t)
	l.abandon()
	junk := "garbage\n" +
		"2026-01-01T00:00:01Z stdout F good\n" +
		"not-a-time stdout F bad time\n" +
		"2026-01-01T00:00:02Z stdin F bad stream\n" +
		"2026-01-01T00:00:03Z stdout X bad tag\n" +
		"2026-01-01T00:00:04Z stdout\n" +
		"\x00\xff\xfe\n" +
		"2026-01-01T00:00:05Z stderr F:extra also good\n" +
		"2026-01-01T00:00:06Z stdout F"
	if err := os.WriteFile(l.path, []byte(junk), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := serveString(t, l, logOptions{tailLines: -1}); got != "good\nalso good\n" {
		t.Errorf("served %q", got)
	}
	for _, line := range []string{"", "x", "2026-01-01T00:00:01Z", "2026-01-01T00:00:01Z stdout", "2026-01-01T00:00:01Z stdout Q x"} {
		if _, err := parseCRIRecord([]byte(line)); !errors.Is(err, errMalformedRecord) {
			t.Errorf("parseCRIRecord(%q) = %v, want errMalformedRecord", line, err)
		}
	}
}

// A follower gets lines as they are written and its stream ends when the
// last copier is done.
func TestCRILogFollow(t *testing.T) {
	l := newTestLog(t)
	l.expect(1)
	pr, pw := io.Pipe()
	go l.copy("stdout", pr)
	out := &lineWriter{lines: make(chan string, 10)}
	served := make(chan error, 1)
	go func() {
		served <- l.serve(context.Background(), out, func() {}, logOptions{tailLines: -1, follow: true})
	}()
	for _, line := range []string{"one", "two"} {
		if _, err := io.WriteString(pw, line+"\n"); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-out.lines:
			if got != line+"\n" {
				t.Fatalf("followed %q, want %q", got, line+"\n")
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("line %q not delivered while the writer is open", line)
		}
	}
	select {
	case err := <-served:
		t.Fatalf("follow ended while the writer is open: %v", err)
	default:
	}
	pw.Close()
	select {
	case err := <-served:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("follow did not end after the writer closed")
	}
}

// A follower that leaves ends its stream.
func TestCRILogFollowEndsWithContext(t *testing.T) {
	l := newTestLog(t)
	l.expect(1)
	ctx, cancel := context.WithCancel(t.Context())
	served := make(chan error, 1)
	go func() { served <- l.serve(ctx, io.Discard, func() {}, logOptions{tailLines: -1, follow: true}) }()
	cancel()
	select {
	case <-served:
	case <-time.After(10 * time.Second):
		t.Fatal("follow did not end with its context")
	}
}

// lineWriter sends each complete line written to it.
type lineWriter struct {
	lines chan string
	buf   []byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.lines <- string(w.buf[:i+1])
		w.buf = w.buf[i+1:]
	}
}

func TestParseLogOptions(t *testing.T) {
	good := []struct {
		query string
		want  logOptions
	}{
		{"", logOptions{tailLines: -1}},
		{"follow=true&timestamps=1&tailLines=3&limitBytes=10&sinceTime=2026-01-01T00:00:00Z",
			logOptions{follow: true, timestamps: true, tailLines: 3, limitBytes: 10, since: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}},
		{"previous=false", logOptions{tailLines: -1}},
	}
	for _, tt := range good {
		got, err := parseLogOptions(httptest.NewRequest("GET", "/containerLogs/a/b/c?"+tt.query, nil))
		if err != nil {
			t.Errorf("%q: %v", tt.query, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(logOptions{})); diff != "" {
			t.Errorf("%q (-want +got):\n%s", tt.query, diff)
		}
	}
	for _, q := range []string{
		"follow=maybe", "timestamps=2", "previous=true", "sinceTime=yesterday", "sinceSeconds=0", "sinceSeconds=-5",
		"tailLines=-1", "tailLines=x", "limitBytes=0", "limitBytes=99999999999999999999", "tailLines=" + strings.Repeat("9", 100),
	} {
		if _, err := parseLogOptions(httptest.NewRequest("GET", "/containerLogs/a/b/c?"+q, nil)); err == nil {
			t.Errorf("%q: no error", q)
		}
	}
}

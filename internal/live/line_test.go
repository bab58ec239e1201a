package live

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestReadLines(t *testing.T) {
	long := strings.Repeat("x", MaxLineBytes+10)
	cases := []struct {
		name, in string
		want     []string
	}{
		{"empty", "", nil},
		{"lines", "a\nb\n", []string{"a", "b"}},
		{"last without newline", "a\nb", []string{"a", "b"}},
		{"empty lines", "\n\n", []string{"", ""}},
		{"oversized", long + "\nnext\n", []string{long[:MaxLineBytes] + truncatedMark, "next"}},
		{"exactly max", long[:MaxLineBytes] + "\n", []string{long[:MaxLineBytes]}},
		{"binary", "\x00\xff\n", []string{"\x00\xff"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			var n int64
			err := ReadLines(strings.NewReader(tc.in), func(l Line) error {
				n++
				if l.N != n {
					t.Errorf("line %d numbered %d", n, l.N)
				}
				got = append(got, l.Text)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// A follow stream cut in the middle of a line is read again, never half.
func TestFollowReaderRefusesPartialLine(t *testing.T) {
	lr := newLineReader(strings.NewReader("whole\nhal"), false)
	if s, err := lr.next(); s != "whole" || err != nil {
		t.Fatalf("%q %v", s, err)
	}
	if _, err := lr.next(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("partial line: %v, want io.ErrUnexpectedEOF", err)
	}
}

func TestParseTimestamped(t *testing.T) {
	ts, text, ok := parseTimestamped("2026-11-30T04:06:57.123456789Z hello world")
	if !ok || text != "hello world" || !ts.Equal(time.Date(2026, 11, 30, 4, 6, 57, 123456789, time.UTC)) {
		t.Errorf("got %v %q %v", ts, text, ok)
	}
	for _, bad := range []string{"", "no timestamp", "2026-13-01T00:00:00Z x", " x"} {
		if _, text, ok := parseTimestamped(bad); ok || text != bad {
			t.Errorf("%q: ok %v text %q, want not ok and the whole line", bad, ok, text)
		}
	}
	if _, text, ok := parseTimestamped("2026-11-30T04:06:57Z"); !ok || text != "" {
		t.Errorf("empty line: %q %v", text, ok)
	}
}

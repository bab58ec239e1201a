package dispatch

import (
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// R-B1: a stored log is complete up to [pods] max_log_bytes and, when it
// was cut there, ends in a line that says so; the whole stays within the
// bound, and a log that fits is stored unchanged.
func TestCutLog(t *testing.T) {
	const limit = 200
	mark := fmt.Sprintf(cutMarkFormat, limit)
	keep := limit - len(mark) - 1
	line := func(n int) string { return strings.Repeat("a", n-1) + "\n" }
	tests := []struct {
		name, log, want string
	}{
		{"empty", "", ""},
		{"fits exactly", strings.Repeat("b", limit), strings.Repeat("b", limit)},
		{"one byte over, cut mid-line", strings.Repeat("c", limit+1), strings.Repeat("c", keep) + "\n" + mark},
		{"cut after a whole line", line(keep) + strings.Repeat("d", 500), line(keep) + mark},
		{"far over", strings.Repeat("e", 10*limit), strings.Repeat("e", keep) + "\n" + mark},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := io.ReadAll(CutLog(strings.NewReader(tc.log), limit))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, string(b)); diff != "" {
				t.Errorf("stored log (-want +got):\n%s", diff)
			}
			if len(b) > limit {
				t.Errorf("stored %d bytes, over the bound %d", len(b), limit)
			}
		})
	}
}

// A bound too small for the line cuts without one: never past the bound.
func TestCutLogTinyBound(t *testing.T) {
	b, err := io.ReadAll(CutLog(strings.NewReader("0123456789"), 4))
	if err != nil || string(b) != "0123" {
		t.Errorf("CutLog with a 4-byte bound = %q, %v; want %q", b, err, "0123")
	}
}

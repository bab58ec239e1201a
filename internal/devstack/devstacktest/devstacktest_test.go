package devstacktest

import "testing"

func TestLastLines(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"", 3, ""},
		{"a", 3, "a"},
		{"a\nb\nc\n", 2, "b\nc"},
		{"a\nb\nc", 2, "b\nc"},
		{"a\nb\nc\n\n", 1, "c"},
		{"a\nb\n", 5, "a\nb"},
	} {
		if got := string(lastLines([]byte(c.in), c.n)); got != c.want {
			t.Errorf("lastLines(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}

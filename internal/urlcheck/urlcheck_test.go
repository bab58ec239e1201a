package urlcheck

import (
	"slices"
	"testing"
)

func TestLoopbackHost(t *testing.T) {
	for host, want := range map[string]bool{
		"localhost": true, "127.0.0.1": true, "127.1.2.3": true, "::1": true,
		"": false, "0.0.0.0": false, "::": false, "10.0.0.1": false, "example.com": false,
		"localhost.": false, "LOCALHOST": false, "127.0.0.1.nip.io": false, "[::1]": false,
	} {
		if got := LoopbackHost(host); got != want {
			t.Errorf("LoopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
}

func TestBaseURL(t *testing.T) {
	tests := []struct {
		raw                       string
		httpLoopback, pathAllowed bool
		want                      []string
	}{
		{"https://crucible.example.com", false, false, nil},
		{"https://crucible.example.com/", false, false, nil},
		{"https://10.0.0.1:6443/prefix", false, true, nil},
		{"http://127.0.0.1:8443", true, false, nil},
		{"http://[::1]:8443", true, false, nil},
		{"http://localhost", true, false, nil},
		{"http://127.0.0.1:6443", false, true, []string{"scheme must be https"}},
		{"http://crucible.example.com", true, false, []string{"http is only allowed on a loopback host"}},
		{"http://127.0.0.1.nip.io", true, false, []string{"http is only allowed on a loopback host"}},
		{"ftp://crucible.example.com", true, false, []string{"scheme must be https"}},
		{"crucible.example.com", true, false, []string{"must be an absolute URL"}},
		{"", true, false, []string{"must be an absolute URL"}},
		{"https://", true, false, []string{"must be an absolute URL"}},
		{"https://%zz", true, false, []string{"not a URL"}},
		{"https://h/x", true, false, []string{"must not have a path"}},
		{"https://u:p@h/x?a=1#f", true, false, []string{"must not contain credentials", "must not have a query", "must not have a fragment", "must not have a path"}},
		{"https://h/?", true, false, []string{"must not have a query"}},
		{"https://h/#", true, false, []string{"must not have a fragment"}},
	}
	for _, tt := range tests {
		if got := BaseURL(tt.raw, tt.httpLoopback, tt.pathAllowed); !slices.Equal(got, tt.want) {
			t.Errorf("BaseURL(%q, %v, %v) = %q, want %q", tt.raw, tt.httpLoopback, tt.pathAllowed, got, tt.want)
		}
	}
}

func FuzzBaseURL(f *testing.F) {
	for _, s := range []string{"https://h", "http://127.0.0.1:1/", "https://u:p@h/x?a#b", "%zz", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		problems := BaseURL(raw, true, false)
		if len(problems) == 0 && BaseURL(raw, true, true) != nil {
			t.Errorf("%q: accepted without a path but refused with one allowed", raw)
		}
		for _, p := range problems {
			if p == "" {
				t.Errorf("%q: empty problem", raw)
			}
		}
	})
}

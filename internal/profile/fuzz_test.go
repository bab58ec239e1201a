package profile

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/google/go-cmp/cmp"
)

// FuzzParse checks that Parse never panics, is deterministic (the same input
// gives the same problems: map order must not leak into the report), that
// every error is a *ProfileError wrapping ErrInvalidProfile, and that an
// accepted profile validates and survives a round trip through TOML.
func FuzzParse(f *testing.F) {
	example, err := os.ReadFile(examplePath)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(example)
	f.Add(encode(f, minimal()))
	f.Add(example[:len(example)/2])                                                        // truncated
	f.Add([]byte(strings.Replace(string(example), "token_file", "tokenfile", 1)))          // unknown key
	f.Add([]byte(strings.Replace(string(example), "qps = 100", "qps = \"100\"", 1)))       // wrong type
	f.Add([]byte(strings.Replace(string(example), "ttl = \"30s\"", "ttl = \"30\"", 1)))    // bad duration
	f.Add([]byte(strings.Replace(string(example), "name = \"wharf\"", "Name = \"W\"", 1))) // case
	f.Add([]byte(strings.Replace(string(example), "[[clusters]]", "[[clusters]]\n[[clusters]]", 1)))
	f.Add([]byte("clusters = [1, {name = \"a\"}, \"x\"]\n[controller]\nexternal_url = \"http://[::1]\""))
	f.Add([]byte("[pods.node_selector]\n\"\" = \"\"\n\"a/b/c\" = 5"))
	f.Add([]byte("default_cluster = 1979-05-27T07:32:00Z\n[mirror]\nttl = nan\nmax_stale = inf"))
	// Token sources (each key that depends on token_source, right and wrong)
	// and placement's keys (capacity, default_cluster "auto", spill-over).
	for _, name := range []string{"clusters.token_source-request.toml", "clusters.token_source-problems.toml",
		"default_cluster.auto-with-capacity.toml", "clusters.name-auto-reserved.toml",
		"pods.classes-spill.toml", "pods.classes-spill-defaults.toml"} {
		data, err := os.ReadFile("testdata/profiles/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(strings.Replace(string(example), "\ntoken_file = ", "\ntoken_source = \"request\"\ntoken_expiration = \"10m\"\n# ", 1)))

	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data)
		_, err2 := Parse(data)
		if errString(err) != errString(err2) {
			t.Fatalf("Parse is not deterministic:\n%v\n---\n%v", err, err2)
		}
		if err != nil {
			perr, ok := errors.AsType[*ProfileError](err)
			if !ok || !errors.Is(err, ErrInvalidProfile) || len(perr.Problems()) == 0 {
				t.Fatalf("Parse error %T %v: want a *ProfileError with problems", err, err)
			}
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("accepted profile does not validate: %v", err)
		}
		again, err := Parse(encode(t, toTree(t, p)))
		if err != nil {
			t.Fatalf("re-encoded profile rejected: %v", err)
		}
		if diff := cmp.Diff(p, again); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
	})
}

// toTree encodes a profile and decodes it generically, so encode can write it.
func toTree(t *testing.T, p *Profile) map[string]any {
	t.Helper()
	data, err := toml.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if _, err := toml.Decode(string(data), &m); err != nil {
		t.Fatalf("decode own encoding: %v\n%s", err, data)
	}
	return m
}

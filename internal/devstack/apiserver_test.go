package devstack

import (
	"slices"
	"strings"
	"testing"
)

// TestAPIServerProfilingIsASwitch: the kube-apiservers serve no profiler
// unless a benchmark asks for one.
func TestAPIServerProfilingIsASwitch(t *testing.T) {
	for _, on := range []bool{false, true} {
		s := &Stack{opts: Options{APIServerProfiling: on}}
		args, err := s.apiserverArgs(&Cluster{Name: "wharf", Server: "https://127.0.0.1:6443", dir: t.TempDir()}, pki{}, SpokeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := map[bool]string{false: "--profiling=false", true: "--profiling=true"}[on]
		var got []string
		for _, a := range args {
			if strings.HasPrefix(a, "--profiling") {
				got = append(got, a)
			}
		}
		if !slices.Equal(got, []string{want}) {
			t.Errorf("APIServerProfiling %v: profiling flags %q, want [%s]", on, got, want)
		}
	}
}

package devstack

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestSpokeNames(t *testing.T) {
	if diff := cmp.Diff([]string{"wharf", "dock", "pier"}, SpokeNames(3)); diff != "" {
		t.Errorf("SpokeNames(3) (-want +got):\n%s", diff)
	}
	names := SpokeNames(30)
	if diff := cmp.Diff([]string{"haven", "spoke-11", "spoke-12"}, names[9:12]); diff != "" {
		t.Errorf("SpokeNames(30)[9:12] (-want +got):\n%s", diff)
	}
	if names[29] != "spoke-30" {
		t.Errorf("SpokeNames(30)[29] = %q, want spoke-30", names[29])
	}
	if diff := cmp.Diff(SpokeNames(12)[:5], SpokeNames(5)); diff != "" {
		t.Errorf("SpokeNames(5) is not the start of SpokeNames(12) (-want +got):\n%s", diff)
	}
	seen := map[string]bool{hubName: true}
	for _, n := range names {
		if msgs := validation.IsDNS1123Label(n); len(msgs) > 0 {
			t.Errorf("%q: %v", n, msgs)
		}
		if seen[n] {
			t.Errorf("%q twice, or the hub's name", n)
		}
		seen[n] = true
	}
	for _, n := range []int{0, -1} {
		if got := SpokeNames(n); len(got) != 0 {
			t.Errorf("SpokeNames(%d) = %q, want none", n, got)
		}
	}
	opts := Options{Spokes: NamedSpokes(names...)}
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		t.Errorf("30 named spokes: %v", err)
	}
}

func TestParseStatus(t *testing.T) {
	for _, tc := range []struct {
		name, status string
		want         memory
		err          string // "" none, "gone" errGone
	}{
		{"running", "Name:\tetcd\nVmPeak:\t  99 kB\nVmRSS:\t   43212 kB\nRssAnon:\t   40000 kB\nRssFile:\t 3212 kB\n", memory{rss: 43212 << 10, anon: 40000 << 10}, ""},
		{"a zombie", "Name:\tetcd\nState:\tZ (zombie)\nThreads:\t1\n", memory{}, "gone"},
		{"no unit", "VmRSS:\t43212\n", memory{}, `unexpected VmRSS line "VmRSS:\t43212"`},
		{"another unit", "VmRSS:\t43 kB\nRssAnon:\t43 MB\n", memory{}, `unexpected RssAnon line "RssAnon:\t43 MB"`},
		{"no number", "VmRSS:\tlots kB\n", memory{}, `VmRSS "lots" is no size in kB`},
		{"negative", "VmRSS:\t-4 kB\n", memory{}, `VmRSS "-4" is no size in kB`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStatus([]byte(tc.status))
			switch {
			case tc.err == "gone" && !errors.Is(err, errGone):
				t.Errorf("err = %v, want errGone", err)
			case tc.err != "gone" && tc.err != "" && (err == nil || err.Error() != tc.err):
				t.Errorf("err = %v, want %s", err, tc.err)
			case tc.err == "" && err != nil:
				t.Errorf("err = %v", err)
			}
			if got != tc.want {
				t.Errorf("parseStatus = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// readMemory reads a live process's memory and tells an ended one apart.
func TestReadMemory(t *testing.T) {
	self, err := readMemory(os.Getpid())
	if err != nil || self.anon <= 0 || self.rss < self.anon {
		t.Errorf("readMemory(self) = %+v, %v; want a positive anon within rss", self, err)
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if got, err := readMemory(cmd.Process.Pid); !errors.Is(err, errGone) || got != (memory{}) {
		t.Errorf("readMemory(ended pid %d) = %+v, %v; want none, errGone", cmd.Process.Pid, got, err)
	}
}

func TestIsSpokeProcess(t *testing.T) {
	for name, want := range map[string]bool{
		"kube-apiserver-wharf":         true,
		"kube-scheduler-dock":          true,
		"kube-controller-manager-pier": true,
		"kwok-spoke-11":                true,
		"crucible-webhook-wharf":       true,
		"kube-apiserver-hub":           false,
		"etcd":                         false,
		"crucible-controller":          false,
		"crucible-controller-b":        false,
		"crucible-dev-runtime":         false,
		"crucible-token-refresher":     false,
		"kueue-wharf":                  false,
	} {
		if got := isSpokeProcess(name); got != want {
			t.Errorf("isSpokeProcess(%q) = %v, want %v", name, got, want)
		}
	}
}

// A stack whose dev runtime is a process of its own needs a binary to run
// it, as a detached one does; given one, the option is valid.
func TestRuntimeProcessNeedsABinary(t *testing.T) {
	for _, o := range []Options{{RuntimeProcess: true}, {Detached: true}} {
		o.setDefaults()
		if err := o.validate(); err == nil || !strings.Contains(err.Error(), "runtimeBinary:") {
			t.Errorf("%+v: %v, want runtimeBinary refused", o, err)
		}
		o.Crucible = "/bin/crucible"
		if err := o.validate(); err != nil && strings.Contains(err.Error(), "runtimeBinary:") {
			t.Errorf("with a binary: %v", err)
		}
	}
}

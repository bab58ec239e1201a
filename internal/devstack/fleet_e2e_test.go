package devstack_test

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
)

// A fleet from SpokeNames, federated: every spoke schedules and runs a pod
// on its own light agents, and Costs puts each spoke's five processes under
// that spoke, with memory, and the rest under the shared parts. A process
// that has gone is reported so, without memory, and the others still are.
func TestFleetOfThreeSpokesAndItsCosts(t *testing.T) {
	names := devstack.SpokeNames(3)
	s := devstacktest.Start(t, devstack.Options{Spokes: devstack.NamedSpokes(names...), Crucible: devstacktest.BuildCrucible})
	for _, c := range s.Spokes {
		pod, err := c.Client.CoreV1().Pods(devstack.SpokeNamespace).Create(t.Context(), testPod("hello", "echo", "hello from "+c.Name), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create a pod on %s: %v", c.Name, err)
		}
		done := waitPod(t, c.Client, pod.Name, finished)
		if done.Status.Phase != corev1.PodSucceeded || done.Spec.NodeName != c.NodeName {
			t.Errorf("%s: pod %s on node %q, want Succeeded on %s", c.Name, done.Status.Phase, done.Spec.NodeName, c.NodeName)
		}
	}

	costs, err := s.Costs()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"wharf", "dock", "pier", ""}
	if diff := cmp.Diff(want, spokesOf(costs)); diff != "" {
		t.Fatalf("Costs' spokes (-want +got):\n%s", diff)
	}
	for i, c := range costs {
		wantNames := []string{"etcd", "kube-apiserver-hub", "crucible-controller"} // the attached runtime and token writer run in this process
		if c.Spoke != "" {
			wantNames = []string{"kube-apiserver-" + c.Spoke, "kube-scheduler-" + c.Spoke, "kube-controller-manager-" + c.Spoke, "kwok-" + c.Spoke, "crucible-webhook-" + c.Spoke}
		}
		if diff := cmp.Diff(sorted(wantNames), sorted(namesOf(c))); diff != "" {
			t.Errorf("costs[%d] (%q) processes (-want +got):\n%s", i, c.Spoke, diff)
		}
		var sum int64
		for _, p := range c.Processes {
			if p.Exited || p.Anon <= 0 || p.RSS < p.Anon || p.PID != s.Processes()[p.Name] {
				t.Errorf("%s: %+v, want pid %d with a positive RSS and its anonymous part", p.Name, p, s.Processes()[p.Name])
			}
			sum += p.RSS
		}
		if c.RSS() != sum {
			t.Errorf("costs[%d].RSS() = %d, want the sum %d", i, c.RSS(), sum)
		}
		label := c.Spoke
		if label == "" {
			label = "shared"
		}
		t.Logf("%-6s RSS %4d MiB, anonymous %4d MiB: %+v", label, c.RSS()>>20, c.Anon()>>20, c.Processes)
	}

	// A spoke's processes collect garbage sooner than the hub's (spokes.go).
	if _, set := os.LookupEnv("GOGC"); !set {
		for name, want := range map[string]bool{"kube-apiserver-wharf": true, "kube-controller-manager-dock": true, "kube-apiserver-hub": false, "etcd": false} {
			environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", s.Processes()[name]))
			if err != nil {
				t.Fatal(err)
			}
			if got := slices.Contains(strings.Split(string(environ), "\x00"), "GOGC=50"); got != want {
				t.Errorf("%s runs with GOGC=50: %v, want %v", name, got, want)
			}
		}
	}

	if err := s.KillProcess("kwok-pier"); err != nil {
		t.Fatal(err)
	}
	after, err := s.Costs()
	if err != nil {
		t.Fatalf("Costs with kwok-pier gone: %v", err)
	}
	pier := after[2]
	i := slices.IndexFunc(pier.Processes, func(p devstack.ProcessCost) bool { return p.Name == "kwok-pier" })
	if i < 0 {
		t.Fatalf("kwok-pier missing from pier's costs: %+v", pier.Processes)
	}
	if got := pier.Processes[i]; !got.Exited || got.RSS != 0 || got.Anon != 0 {
		t.Errorf("kwok-pier after its kill: %+v, want Exited with no RSS", got)
	}
	for _, p := range pier.Processes {
		if p.Name != "kwok-pier" && (p.Exited || p.RSS <= 0) {
			t.Errorf("%s after kwok-pier's kill: %+v, want it running with a positive RSS", p.Name, p)
		}
	}
}

func spokesOf(costs []devstack.Cost) []string {
	spokes := make([]string, len(costs))
	for i, c := range costs {
		spokes[i] = c.Spoke
	}
	return spokes
}

func namesOf(c devstack.Cost) []string {
	names := make([]string, len(c.Processes))
	for i, p := range c.Processes {
		names[i] = p.Name
	}
	return names
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

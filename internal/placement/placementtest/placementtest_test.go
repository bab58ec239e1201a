package placementtest

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const s = time.Second

// A tiny stream by hand. Node a has 2 GPUs, b 1, which the tenant holds
// until 3 s. j0 (2 GPUs, 4 s) takes a at 0. j1 and j2 (1 GPU each) arrive
// at 1 and find nothing free; at 3 the tenant ends and j1 takes b until 5;
// at 4 j0 ends and j2 takes a until 5. Waits 0, 2 and 3 s; 11 GPU-seconds
// used of 3 × 5 less the tenant's 3.
func TestOracleByHand(t *testing.T) {
	nodes := []Node{{"x", "a", 2}, {"y", "b", 1}}
	tenant := []Hold{{"y", "b", 1, 0, 3 * s}}
	jobs := []Job{{2, 0, 4 * s}, {1, 1 * s, 2 * s}, {1, 1 * s, 1 * s}}
	runs, err := Oracle(nodes, tenant, jobs)
	if err != nil {
		t.Fatal(err)
	}
	want := []Run{
		{Job: jobs[0], Cluster: "x", Start: 0, End: 4 * s},
		{Job: jobs[1], Cluster: "y", Start: 3 * s, End: 5 * s},
		{Job: jobs[2], Cluster: "x", Start: 4 * s, End: 5 * s},
	}
	if diff := cmp.Diff(want, runs); diff != "" {
		t.Errorf("runs (-want +got):\n%s", diff)
	}
	got, err := Measure(nodes, tenant, runs)
	if err != nil {
		t.Fatal(err)
	}
	wantFig := Figures{Occupancy: 11.0 / 12, Makespan: 5 * s, MeanWait: 5 * s / 3, P95Wait: 3 * s}
	if diff := cmp.Diff(wantFig, got); diff != "" {
		t.Errorf("figures (-want +got):\n%s", diff)
	}
}

// The oracle knows the tenant's holds to come: on a, held from 2 s to 3 s
// (big is held throughout), j0 (3 s) would run into the hold, so it waits
// until the hold ends; j1 and j2 (1 s), behind it in the list, fit before
// the hold and run at 0 and 1.
func TestOracleKnowsTheTenantsHoldsToCome(t *testing.T) {
	nodes := []Node{{"x", "a", 1}, {"y", "big", 4}}
	tenant := []Hold{{"x", "a", 1, 2 * s, 3 * s}, {"y", "big", 4, 0, 10 * s}}
	jobs := []Job{{1, 0, 3 * s}, {1, 0, 1 * s}, {1, 0, 1 * s}}
	if diff := cmp.Diff([]string{"x@3s", "x@0s", "x@1s"}, starts(t, nodes, tenant, jobs)); diff != "" {
		t.Errorf("runs (-want +got):\n%s", diff)
	}
}

// Best fit: a 1-GPU job goes to the node it leaves fullest, a 2-GPU job
// then to the one it still fits.
func TestOracleFitsBest(t *testing.T) {
	nodes := []Node{{"x", "four", 4}, {"y", "two", 2}, {"z", "one", 1}}
	jobs := []Job{{1, 0, s}, {2, 0, s}, {2, 0, s}, {1, 0, s}}
	if diff := cmp.Diff([]string{"z@0s", "y@0s", "x@0s", "x@0s"}, starts(t, nodes, nil, jobs)); diff != "" {
		t.Errorf("runs (-want +got):\n%s", diff)
	}
}

func starts(t *testing.T, nodes []Node, tenant []Hold, jobs []Job) []string {
	t.Helper()
	runs, err := Oracle(nodes, tenant, jobs)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range runs {
		got = append(got, r.Cluster+"@"+r.Start.String())
	}
	return got
}

func TestOracleRefusesAJobNoNodeCanRun(t *testing.T) {
	_, err := Oracle([]Node{{"x", "a", 2}}, nil, []Job{{1, 0, s}, {4, 0, s}})
	if err == nil || !strings.Contains(err.Error(), "job 1: 4 GPUs") {
		t.Errorf("err %v, want job 1's 4 GPUs named", err)
	}
	_, err = Oracle([]Node{{"x", "a", 2}}, []Hold{{"x", "b", 1, 0, s}}, nil)
	if err == nil || !strings.Contains(err.Error(), "x/b: no such node") {
		t.Errorf("err %v, want the hold's node named", err)
	}
}

func TestStream(t *testing.T) {
	spec := StreamSpec{Seed: 39, Pods: 200, Sizes: []int{1, 2, 4}, MinDuration: 2 * s, MaxDuration: 12 * s, FleetGPUs: 20, Load: 1.2}
	a, err := Stream(spec)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Stream(spec)
	if diff := cmp.Diff(a, b); diff != "" {
		t.Fatalf("the same spec drew two streams:\n%s", diff)
	}
	var demand float64
	sizes := map[int]int{}
	for i, j := range a {
		if j.Duration < 2*s || j.Duration > 12*s || j.Duration%s != 0 || (i > 0 && j.Arrival < a[i-1].Arrival) {
			t.Fatalf("job %d: %+v", i, j)
		}
		sizes[j.GPUs]++
		demand += float64(j.GPUs) * j.Duration.Seconds()
	}
	if a[0].Arrival != 0 || len(sizes) != 3 || sizes[1]+sizes[2]+sizes[4] != 200 {
		t.Errorf("first arrival %s, sizes %v", a[0].Arrival, sizes)
	}
	if load := demand / a[len(a)-1].Arrival.Seconds() / 20; load < 1.199 || load > 1.201 {
		t.Errorf("demand %.0f GPU-s over %s: %.3f× the fleet, want 1.2×", demand, a[len(a)-1].Arrival, load)
	}
}

func TestStreamRefusesABadSpec(t *testing.T) {
	_, err := Stream(StreamSpec{Pods: 0, Sizes: []int{0}, MinDuration: 3 * s, MaxDuration: s, FleetGPUs: 0, Load: 0})
	want := []string{"pods: 0", "sizes: 0 GPUs", "durations: 3s to 1s", "fleet GPUs: 0", "load: 0"}
	for _, w := range want {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("err %v, want it to name %q", err, w)
		}
	}
}

func TestMeasureRefusesARunThatNeverRan(t *testing.T) {
	_, err := Measure([]Node{{"x", "a", 1}}, nil, []Run{{Job: Job{GPUs: 1, Arrival: 2 * s}, Start: s, End: 3 * s}})
	if err == nil || !strings.Contains(err.Error(), "run 0") {
		t.Errorf("err %v, want run 0 named", err)
	}
}

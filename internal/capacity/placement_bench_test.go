package capacity

import (
	"flag"
	"fmt"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"crucible.dev/crucible/internal/benchreport"
	"crucible.dev/crucible/internal/placement"
)

// Placement's decision at fleet scale (issue 39's placement row, part a):
// 100 spokes of 1,000 nodes each.
const (
	decisionSpokes = 100
	decisionNodes  = 1000
)

// decisionFleet is a fleet of decisionSpokes synced views of decisionNodes
// nodes each, 800 CPU nodes and 200 tainted 8-GPU nodes, and the spokes'
// names in profile order. Spoke i's GPU nodes each hold a bound pod leaving
// i%5 GPUs free: a fifth of the spokes take no 1-GPU pod (their Judge
// walks the nodes twice and words a reason), the others score 200 to 800.
// One pod per GPU node: Judge's cost is per node, the view keeps a pod only
// as its node's sums.
func decisionFleet(tb testing.TB) (*Fleet, []string) {
	tb.Helper()
	f := NewFleet(nil)
	names := make([]string, decisionSpokes)
	for i := range decisionSpokes {
		names[i] = fmt.Sprintf("spoke-%03d", i)
		v, _ := testView(tb, nil)
		for j := range decisionNodes {
			name := fmt.Sprintf("node-%04d", j)
			if j%5 != 0 {
				addNode(tb, v, cpuNode(name, 64))
				continue
			}
			addNode(tb, v, gpuNode(name, 8, h100))
			addPod(tb, v, gpuPod(fmt.Sprintf("g-%d", j), 8-i%5, on(name)))
		}
		f.views[names[i]] = &fleetView{view: v}
	}
	return f, names
}

// decideOnce is one placement as the API's submit makes it: every spoke's
// view judges the pod, then placement decides over the candidates.
func decideOnce(f *Fleet, names []string, cands []placement.Candidate, pod *corev1.Pod) (placement.Decision, error) {
	for i, name := range names {
		c := placement.Candidate{Cluster: name}
		if v, ok := f.Judge(name, pod); ok {
			c.View, c.Fits, c.Reason = true, v.Fits, v.Reason
			c.Resource, c.Free, c.Total = string(v.Resource), v.Free, v.Total
		}
		cands[i] = c
	}
	return placement.Decide(placement.Request{}, cands)
}

// BenchmarkPlacementDecision is one placement decision of a 1-GPU pod over
// decisionFleet: 100 Judges and a Decide.
func BenchmarkPlacementDecision(b *testing.B) {
	f, names := decisionFleet(b)
	cands := make([]placement.Candidate, len(names))
	pod := gpuPod("p", 1)
	b.ReportAllocs()
	for b.Loop() {
		if d, err := decideOnce(f, names, cands, pod); err != nil || d.Cluster != "spoke-004" {
			b.Fatalf("decision %+v, %v; want spoke-004 (4 GPUs free a node)", d.Cluster, err)
		}
	}
}

// decisionCost is the mean cost of one decision over d.
type decisionCost struct {
	n          int
	us, allocs float64
}

func timeDecisions(tb testing.TB, f *Fleet, names []string, d time.Duration) decisionCost {
	tb.Helper()
	cands := make([]placement.Candidate, len(names))
	pod := gpuPod("p", 1)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start, n := time.Now(), 0
	for ; n == 0 || time.Since(start) < d; n++ {
		if _, err := decideOnce(f, names, cands, pod); err != nil {
			tb.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	runtime.ReadMemStats(&after)
	return decisionCost{n: n, us: float64(elapsed.Microseconds()) / float64(n), allocs: float64(after.Mallocs-before.Mallocs) / float64(n)}
}

// BenchmarkPlacementReport writes the placement rows of `make bench`:
// the decision's cost over decisionFleet (timed here for the run's
// -benchtime when it is a duration, else 2 s: the report runs it 1x), and
// what the view keeps per node and per pod (BenchmarkViewMemoryPerNode's
// and BenchmarkViewMemoryPerPod's measurements).
func BenchmarkPlacementReport(b *testing.B) {
	d := 2 * time.Second
	if fl := flag.Lookup("test.benchtime"); fl != nil {
		if v, err := time.ParseDuration(fl.Value.String()); err == nil {
			d = v
		}
	}
	for b.Loop() {
		f, names := decisionFleet(b)
		cost := timeDecisions(b, f, names, d)
		runtime.KeepAlive(f)
		perNode, perPod := viewMemoryPerNode(b), viewMemoryPerPod(b)
		b.Logf("decision %.1f µs (%.0f allocs, %d decisions); view %.0f B/node, %.0f B/pod", cost.us, cost.allocs, cost.n, perNode, perPod)
		rows := []benchreport.Record{
			{ID: "placement", Case: "decision, 100 spokes × 1,000 nodes", Unit: "µs/decision", Value: cost.us, LowerIsBetter: true, Goal: "report",
				Extra: map[string]float64{"allocs": cost.allocs},
				Method: fmt.Sprintf("one 1-GPU pod judged by each of 100 synced capacity views (Fleet.Judge) and placement.Decide over the 100 candidates, "+
					"as a submit with cluster auto decides; each spoke 800 CPU nodes and 200 tainted 8-GPU nodes with 0 to 4 GPUs free a node "+
					"(a fifth of the spokes fit nowhere and word a reason); one goroutine, %d decisions over %s", cost.n, d)},
			{ID: "placement", Case: "view memory per node", Unit: "B/node", Value: perNode, LowerIsBetter: true, Goal: "report",
				Method: "1,000 GPU nodes as a watch decodes them (feature-discovery labels, images, addresses) fed to a view; live heap after a GC, before and after"},
			{ID: "placement", Case: "view memory per pod", Unit: "B/pod", Value: perPod, LowerIsBetter: true, Goal: "report",
				Method: "100,000 bound pods as a watch decodes them fed through the view's transform into its store and sums; live heap after a GC, before and after"},
		}
		for _, r := range rows {
			if err := benchreport.Append(r); err != nil {
				b.Fatal(err)
			}
		}
	}
}

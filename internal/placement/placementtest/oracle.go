package placementtest

import (
	"fmt"
	"math"
	"time"
)

// Node is one GPU node of the fleet.
type Node struct {
	Cluster, Name string
	GPUs          int
}

// Hold is another tenant's pod holding GPUs of a node from Start to End
// (from the stream's start).
type Hold struct {
	Cluster, Node string
	GPUs          int
	Start, End    time.Duration
}

// Run is what became of one job: where it ran, and when it started
// running and ended (from the stream's start).
type Run struct {
	Job
	Cluster    string
	Start, End time.Duration
}

// Oracle schedules jobs offline with perfect knowledge: greedy list
// scheduling over the whole fleet. At every moment something changes (a
// job arrives or ends, a tenant's hold starts or ends) it starts, in
// arrival order, every waiting job some node can run for its whole
// duration, knowing the tenant's holds to come; of the nodes that can, the
// one left with the fewest free GPUs (best fit). Runs are in jobs' order.
// An error names a job no node can ever run, or a hold on no node of the
// fleet.
func Oracle(nodes []Node, tenant []Hold, jobs []Job) ([]Run, error) {
	f, err := newFleet(nodes, tenant)
	if err != nil {
		return nil, err
	}
	runs := make([]Run, len(jobs))
	var waiting []int
	next, started := 0, 0
	for t := time.Duration(0); started < len(jobs); {
		f.endRuns(t)
		for ; next < len(jobs) && jobs[next].Arrival <= t; next++ {
			waiting = append(waiting, next)
		}
		kept := waiting[:0]
		for _, i := range waiting {
			n := f.bestFit(t, jobs[i])
			if n < 0 {
				kept = append(kept, i)
				continue
			}
			f.start(n, t, jobs[i])
			runs[i] = Run{Job: jobs[i], Cluster: nodes[n].Cluster, Start: t, End: t + jobs[i].Duration}
			started++
		}
		waiting = kept
		upcoming := f.nextChange(t)
		if next < len(jobs) {
			upcoming = min(upcoming, jobs[next].Arrival)
		}
		if upcoming == never && started < len(jobs) {
			i := waiting[0]
			return nil, fmt.Errorf("job %d: %d GPUs: no node of the fleet can run it", i, jobs[i].GPUs)
		}
		t = upcoming
	}
	return runs, nil
}

const never = time.Duration(math.MaxInt64)

// fleet is the oracle's state: per node, the jobs running and the tenant's
// holds.
type fleet struct {
	nodes   []Node
	holds   [][]Hold
	running [][]Run
}

func newFleet(nodes []Node, tenant []Hold) (*fleet, error) {
	f := &fleet{nodes: nodes, holds: make([][]Hold, len(nodes)), running: make([][]Run, len(nodes))}
	for _, h := range tenant {
		n := f.index(h.Cluster, h.Node)
		if n < 0 {
			return nil, fmt.Errorf("tenant hold on %s/%s: no such node", h.Cluster, h.Node)
		}
		f.holds[n] = append(f.holds[n], h)
	}
	return f, nil
}

func (f *fleet) index(cluster, node string) int {
	for i, n := range f.nodes {
		if n.Cluster == cluster && n.Name == node {
			return i
		}
	}
	return -1
}

func (f *fleet) endRuns(t time.Duration) {
	for n, runs := range f.running {
		kept := runs[:0]
		for _, r := range runs {
			if r.End > t {
				kept = append(kept, r)
			}
		}
		f.running[n] = kept
	}
}

func (f *fleet) start(n int, t time.Duration, j Job) {
	f.running[n] = append(f.running[n], Run{Job: j, Start: t, End: t + j.Duration})
}

// free is how many GPUs of node n are free through [t, t+d): its jobs
// running now only end, so the least is the tenant's most held then.
func (f *fleet) free(n int, t, d time.Duration) int {
	free := f.nodes[n].GPUs
	for _, r := range f.running[n] {
		free -= r.GPUs
	}
	return free - f.mostHeld(n, t, t+d)
}

// mostHeld is the most GPUs the tenant holds on node n at once in [from, to).
func (f *fleet) mostHeld(n int, from, to time.Duration) int {
	most := 0
	for _, at := range f.holdStarts(n, from) {
		if at >= to {
			continue
		}
		held := 0
		for _, h := range f.holds[n] {
			if h.Start <= at && at < h.End {
				held += h.GPUs
			}
		}
		most = max(most, held)
	}
	return most
}

// holdStarts are the moments in [from, …) the tenant's holding on n can
// grow: from itself, and every hold's start after it.
func (f *fleet) holdStarts(n int, from time.Duration) []time.Duration {
	at := []time.Duration{from}
	for _, h := range f.holds[n] {
		if h.Start > from {
			at = append(at, h.Start)
		}
	}
	return at
}

// bestFit is the node that can run j from t to its end with the fewest GPUs
// left, the first on a tie; -1 if none can.
func (f *fleet) bestFit(t time.Duration, j Job) int {
	best, bestLeft := -1, 0
	for n := range f.nodes {
		left := f.free(n, t, j.Duration) - j.GPUs
		if left >= 0 && (best < 0 || left < bestLeft) {
			best, bestLeft = n, left
		}
	}
	return best
}

// nextChange is the first moment after t a running job ends or a hold
// starts or ends; never if none will.
func (f *fleet) nextChange(t time.Duration) time.Duration {
	next := never
	for n := range f.nodes {
		for _, r := range f.running[n] {
			if r.End > t {
				next = min(next, r.End)
			}
		}
		for _, h := range f.holds[n] {
			for _, at := range []time.Duration{h.Start, h.End} {
				if at > t {
					next = min(next, at)
				}
			}
		}
	}
	return next
}

package placementtest

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Figures are how well a run used the fleet.
type Figures struct {
	// Occupancy is the GPU-seconds the jobs ran ÷ the GPU-seconds the
	// fleet had for them over the makespan (its GPUs less the tenant's
	// holds), from the first arrival to the last job's end.
	Occupancy float64
	Makespan  time.Duration
	// MeanWait and P95Wait are over each job's wait from its arrival
	// (submit) to its start (running); P95 by nearest rank.
	MeanWait, P95Wait time.Duration
}

// Measure is runs' figures over nodes less the tenant's holds. An error
// names a run that never started or ended, or started before it arrived.
func Measure(nodes []Node, tenant []Hold, runs []Run) (Figures, error) {
	if len(runs) == 0 {
		return Figures{}, errors.New("no runs to measure")
	}
	first, last := runs[0].Arrival, time.Duration(0)
	var used float64
	waits := make([]time.Duration, len(runs))
	for i, r := range runs {
		if r.End <= r.Start || r.Start < r.Arrival {
			return Figures{}, fmt.Errorf("run %d: arrived %s, ran %s to %s: not a run", i, r.Arrival, r.Start, r.End)
		}
		first, last = min(first, r.Arrival), max(last, r.End)
		used += float64(r.GPUs) * (r.End - r.Start).Seconds()
		waits[i] = r.Start - r.Arrival
	}
	makespan := last - first
	available := 0.0
	for _, n := range nodes {
		available += float64(n.GPUs) * makespan.Seconds()
	}
	for _, h := range tenant {
		if overlap := min(h.End, last) - max(h.Start, first); overlap > 0 {
			available -= float64(h.GPUs) * overlap.Seconds()
		}
	}
	slices.Sort(waits)
	var sum time.Duration
	for _, w := range waits {
		sum += w
	}
	rank := (len(waits)*95 + 99) / 100 // ⌈0.95 n⌉
	return Figures{
		Occupancy: used / available,
		Makespan:  makespan,
		MeanWait:  sum / time.Duration(len(waits)),
		P95Wait:   waits[rank-1],
	}, nil
}

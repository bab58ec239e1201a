package placementtest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Job is one GPU pod of the stream: how many GPUs it asks, when it is
// submitted (from the stream's start) and how long it runs once running.
type Job struct {
	GPUs     int
	Arrival  time.Duration
	Duration time.Duration
}

// StreamSpec is what a stream is drawn from.
type StreamSpec struct {
	Seed uint64
	Pods int
	// Sizes are the GPU counts drawn from, each alike likely.
	Sizes []int
	// MinDuration and MaxDuration bound each pod's run, drawn uniformly
	// in whole seconds (a dev-stack pod sleeps whole seconds).
	MinDuration, MaxDuration time.Duration
	// FleetGPUs and Load set the arrivals: the stream asks Load times the
	// fleet's GPU-seconds over the span of its arrivals.
	FleetGPUs int
	Load      float64
}

// Stream draws spec's jobs, in arrival order, the first at 0: the same
// spec always gives the same stream. Arrivals are a Poisson process whose
// span is scaled so that the jobs' GPU-seconds are exactly Load times
// FleetGPUs over it.
func Stream(spec StreamSpec) ([]Job, error) {
	if err := spec.check(); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(spec.Seed, spec.Seed^0x9e3779b97f4a7c15))
	jobs := make([]Job, spec.Pods)
	gaps := make([]float64, spec.Pods)
	var demand, span float64
	minS, maxS := int(spec.MinDuration/time.Second), int(spec.MaxDuration/time.Second)
	for i := range jobs {
		jobs[i].GPUs = spec.Sizes[rng.IntN(len(spec.Sizes))]
		jobs[i].Duration = time.Duration(minS+rng.IntN(maxS-minS+1)) * time.Second
		demand += float64(jobs[i].GPUs) * jobs[i].Duration.Seconds()
		if i > 0 {
			gaps[i] = rng.ExpFloat64()
			span += gaps[i]
		}
	}
	scale := 0.0
	if span > 0 {
		scale = demand / (spec.Load * float64(spec.FleetGPUs)) / span
	}
	at := 0.0
	for i := range jobs {
		at += gaps[i] * scale
		jobs[i].Arrival = time.Duration(at * float64(time.Second)).Round(time.Millisecond)
	}
	return jobs, nil
}

// check reports every bad field of spec at once, each by name.
func (spec StreamSpec) check() error {
	var errs []error
	if spec.Pods < 1 {
		errs = append(errs, fmt.Errorf("pods: %d, want at least 1", spec.Pods))
	}
	if len(spec.Sizes) == 0 {
		errs = append(errs, errors.New("sizes: none"))
	}
	for _, s := range spec.Sizes {
		if s < 1 {
			errs = append(errs, fmt.Errorf("sizes: %d GPUs, want at least 1", s))
		}
	}
	if spec.MinDuration < time.Second || spec.MaxDuration < spec.MinDuration {
		errs = append(errs, fmt.Errorf("durations: %s to %s, want at least 1s and min ≤ max", spec.MinDuration, spec.MaxDuration))
	}
	if spec.FleetGPUs < 1 {
		errs = append(errs, fmt.Errorf("fleet GPUs: %d, want at least 1", spec.FleetGPUs))
	}
	if spec.Load <= 0 {
		errs = append(errs, fmt.Errorf("load: %g, want more than 0", spec.Load))
	}
	return errors.Join(errs...)
}

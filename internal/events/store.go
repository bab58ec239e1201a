package events

import (
	"context"
	"slices"

	"crucible.dev/crucible/internal/store"
)

// Store is a store.Store that publishes every created row and every update
// that changed what a watcher sees of a row (state, exit code, reason, pod
// uid, log collected, and what ObservePod records: node and waiting). Publishing happens after the write committed, so a
// subscriber that re-reads the row finds at least that state.
type Store struct {
	store.Store
	Pub Publisher
}

var _ store.Store = Store{}

// CreateWorkPod creates the row and publishes it as the store wrote it.
func (s Store) CreateWorkPod(ctx context.Context, p store.WorkPod) (store.WorkPod, error) {
	row, err := s.Store.CreateWorkPod(ctx, p)
	if err == nil {
		s.pub().Publish(row)
	}
	return row, err
}

// UpdateWorkPod updates the row and publishes it if a watcher would see a
// difference.
func (s Store) UpdateWorkPod(ctx context.Context, id string, fn func(*store.WorkPod) error) (store.WorkPod, error) {
	var before store.WorkPod
	p, err := s.Store.UpdateWorkPod(ctx, id, func(p *store.WorkPod) error {
		before = *p
		return fn(p)
	})
	if err == nil && visiblyChanged(before, p) {
		s.pub().Publish(p)
	}
	return p, err
}

// TransitionWorkPod applies t and publishes the row it wrote: a transition
// that matched always sets a state or a field a watcher sees.
func (s Store) TransitionWorkPod(ctx context.Context, id string, t store.Transition) (store.WorkPod, error) {
	p, err := s.Store.TransitionWorkPod(ctx, id, t)
	if err == nil {
		s.pub().Publish(p)
	}
	return p, err
}

// MoveWorkPod moves the row and publishes it: watchers see it pending on
// its new cluster.
func (s Store) MoveWorkPod(ctx context.Context, id string, m store.Move) (store.WorkPod, error) {
	p, err := s.Store.MoveWorkPod(ctx, id, m)
	if err == nil {
		s.pub().Publish(p)
	}
	return p, err
}

// ObservePod records what the spoke said of the pod and publishes the row
// when that changed it: watchers see why a pod waits while it does.
func (s Store) ObservePod(ctx context.Context, id string, o store.Observation) (store.WorkPod, bool, error) {
	p, changed, err := s.Store.ObservePod(ctx, id, o)
	if err == nil && changed {
		s.pub().Publish(p)
	}
	return p, changed, err
}

func (s Store) pub() Publisher {
	if s.Pub == nil {
		return Discard{}
	}
	return s.Pub
}

func visiblyChanged(a, b store.WorkPod) bool {
	return a.State != b.State || a.Reason != b.Reason || a.PodUID != b.PodUID || a.LogCollected != b.LogCollected ||
		!slices.Equal(ptrSlice(a.ExitCode), ptrSlice(b.ExitCode))
}

func ptrSlice(p *int32) []int32 {
	if p == nil {
		return nil
	}
	return []int32{*p}
}

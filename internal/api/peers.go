package api

import (
	"context"
	"fmt"
	"slices"
	"time"

	"crucible.dev/crucible/internal/capacity"
	"crucible.dev/crucible/internal/store"
	"crucible.dev/crucible/internal/workpod"
)

// inFlight are the states of a placed row whose pod may not be in its
// spoke's view yet.
var inFlight = []store.State{store.StatePending, store.StateDispatched}

// CountPlacements counts against the capacity views the placements other
// replicas made (R-PL1: the rows say where they went) whose pods the views
// may not show yet: rows placed in the last capacity.ReserveTTL, pending
// or dispatched, not seen scheduled. Every replica answers submits and
// reserves what it places itself; without this, two replicas placing at
// once would both send a pod to the same last free GPU. A row is read in
// full (its spec, for the pod's requests and constraints) once, and
// counts until ReserveTTL after its creation or until its spoke's watch
// shows the pod bound, as the placing replica's own reservation does. The
// controller calls it every second on every replica.
func (s *Server) CountPlacements(ctx context.Context) error {
	now := time.Now()
	// No state asked: the list reads the index of placed rows
	// (store.TestPlacedRowsUseTheirIndex), a ReserveTTL's worth of them.
	rows, err := s.Store.ListWorkPods(ctx, store.Filter{Placed: true, CreatedSince: now.Add(-capacity.ReserveTTL), WithoutSpec: true})
	if err != nil {
		return fmt.Errorf("list placements in flight: %w", err)
	}
	s.pruneCounted(now)
	for _, row := range rows {
		if !slices.Contains(inFlight, row.State) || row.Node != "" || s.isCounted(row.ID) {
			continue
		}
		if err := s.countPlacement(ctx, row.ID); err != nil {
			s.Log.Info("a placement of another replica is not counted", "pod", row.ID, "error", err)
		}
	}
	return nil
}

// countPlacement reads row id in full and reserves its pod on its cluster
// until ReserveTTL after the row's creation.
func (s *Server) countPlacement(ctx context.Context, id string) error {
	row, err := s.Store.GetWorkPod(ctx, id)
	if err != nil {
		return err
	}
	until := row.CreatedAt.Add(capacity.ReserveTTL)
	p := s.profile()
	c, ok := p.Cluster(row.Cluster)
	if !ok {
		s.markCounted(id, until) // a cluster gone from the profile has no view
		return nil
	}
	wp, _, err := workpod.DecodeStored(row.Spec)
	if err != nil {
		return err
	}
	valid, errs := workpod.Check(wp)
	if len(errs) > 0 {
		return errs.ToAggregate()
	}
	pod, err := podOn(p, c, valid)
	if err != nil {
		return err
	}
	s.placing.Lock() // a reservation is part of placing's one step
	s.Capacity.ReserveUntil(row.Cluster, pod, until)
	s.placing.Unlock()
	s.markCounted(id, until)
	return nil
}

// markCounted records that id's pod counts against its view until until.
func (s *Server) markCounted(id string, until time.Time) {
	s.countedMu.Lock()
	defer s.countedMu.Unlock()
	s.counted[id] = until
}

func (s *Server) isCounted(id string) bool {
	s.countedMu.Lock()
	defer s.countedMu.Unlock()
	_, ok := s.counted[id]
	return ok
}

// pruneCounted forgets the rows whose count has ended: the map holds a
// ReserveTTL's worth of placements.
func (s *Server) pruneCounted(now time.Time) {
	s.countedMu.Lock()
	defer s.countedMu.Unlock()
	for id, until := range s.counted {
		if !now.Before(until) {
			delete(s.counted, id)
		}
	}
}

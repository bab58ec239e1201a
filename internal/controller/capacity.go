package controller

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"k8s.io/client-go/kubernetes"

	"crucible.dev/crucible/internal/fleet"
)

// capacityViews runs the capacity views of the spokes that ask for one on
// every replica (each answers submits), in step with reloads (reload.go).
type capacityViews struct{ c *parts }

func (v capacityViews) Start(ctx context.Context) error {
	go v.countPlacements(ctx)
	v.c.capacity.Run(ctx, capacitySpokes(v.c.clients))
	return nil
}

// placementCounter is api.Server.CountPlacements: other replicas'
// placements counted against this replica's views.
type placementCounter interface {
	CountPlacements(ctx context.Context) error
}

// countPlacementsEvery is how often a replica reads the placements in
// flight: a placement of another replica counts against this one's views
// at most this late (its pod, on the spoke, shows in the views' watch
// about as soon).
const countPlacementsEvery = time.Second

// countPlacements counts the other replicas' placements while some spoke
// has a view; a read that fails is logged and tried again next tick.
func (v capacityViews) countPlacements(ctx context.Context) {
	_ = wait.PollUntilContextCancel(ctx, countPlacementsEvery, false, func(ctx context.Context) (bool, error) {
		if len(capacitySpokes(v.c.clients)) == 0 {
			return false, nil
		}
		if err := v.c.placements.CountPlacements(ctx); err != nil && ctx.Err() == nil {
			v.c.log.Warn("counting other replicas' placements failed", "error", err)
		}
		return false, nil
	})
}

// capacitySpokes are the spokes with capacity = true that take new pods
// (not draining), each with its current client.
func capacitySpokes(clients *fleet.Clients) map[string]kubernetes.Interface {
	out := map[string]kubernetes.Interface{}
	for _, c := range clients.All() {
		if c.Entry.Capacity && !clients.Draining(c.Entry.Name) {
			out[c.Entry.Name] = c.Kube
		}
	}
	return out
}

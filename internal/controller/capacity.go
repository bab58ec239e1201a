package controller

import (
	"context"

	"k8s.io/client-go/kubernetes"

	"crucible.dev/crucible/internal/fleet"
)

// capacityViews runs the capacity views of the spokes that ask for one on
// every replica (each answers submits), in step with reloads (reload.go).
type capacityViews struct{ c *parts }

func (v capacityViews) Start(ctx context.Context) error {
	v.c.capacity.Run(ctx, capacitySpokes(v.c.clients))
	return nil
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

package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"k8s.io/client-go/rest"
	cpv1alpha1 "sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"
	cpclient "sigs.k8s.io/cluster-inventory-api/client/clientset/versioned"

	"crucible.dev/crucible/internal/fleet"
	"crucible.dev/crucible/internal/inventory"
	"crucible.dev/crucible/internal/metrics"
	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/render"
	"crucible.dev/crucible/internal/serverpin"
)

// fleetSources is what the running fleet is made of: the profile file's
// [[clusters]] and the spokes [fleet] cluster_profiles reads. Either side
// changing applies both, through one reload at a time, so that a
// ClusterProfile that appears during a file reload is neither lost nor
// applied against a file profile that is no longer in force.
type fleetSources struct {
	mu       sync.Mutex
	file     *profile.Profile             // the file's profile in force
	profiles []*cpv1alpha1.ClusterProfile // the ClusterProfiles last listed
	pins     map[string]render.ServerPin  // [fleet] server_pins; nil: none
	refused  map[string]string            // ClusterProfile name → why it makes no spoke, as last logged
}

// loadPins reads [fleet] server_pins at start: a pins file that does not
// load stops the controller, never leaves the ClusterProfiles unpinned.
func loadPins(f profile.Fleet) (map[string]render.ServerPin, error) {
	if f.ServerPins == "" {
		return nil, nil
	}
	pins, err := serverpin.Load(f.ServerPins)
	if err != nil {
		return nil, fmt.Errorf("[fleet] server_pins: %w", err)
	}
	return pins, nil
}

// reloadFile applies a new profile file with the ClusterProfiles' spokes
// as they are.
func (c *parts) reloadFile(ctx context.Context, next *profile.Profile) (fleet.Changes, error) {
	c.sources.mu.Lock()
	defer c.sources.mu.Unlock()
	ch, err := c.reload(ctx, c.merge(next))
	if err == nil {
		c.sources.file = next
	}
	return ch, err
}

// reloadProfiles applies the ClusterProfiles as just listed, with the
// profile file as it is.
func (c *parts) reloadProfiles(ctx context.Context, list []*cpv1alpha1.ClusterProfile) {
	c.sources.mu.Lock()
	defer c.sources.mu.Unlock()
	c.sources.profiles = list
	ch, err := c.reload(ctx, c.merge(c.sources.file))
	switch {
	case err != nil:
		c.log.Error("ClusterProfiles changed, and the fleet could not follow: it is unchanged", "error", err)
	case !ch.Empty():
		c.log.Info("ClusterProfiles changed the fleet", "added", ch.Added, "changed", ch.Changed, "removed", ch.Removed, "returned", ch.Returned)
	}
}

// merge is file with the spokes the listed ClusterProfiles make appended
// to its [[clusters]]. A ClusterProfile that makes none is logged once
// with why (until its reason changes) and counted.
func (c *parts) merge(file *profile.Profile) *profile.Profile {
	s := &c.sources
	if file.Fleet.ClusterProfiles == "" {
		return file
	}
	merged := *file
	merged.Clusters = slices.Clone(file.Clusters)
	refused := map[string]string{}
	var spokes, notListed int
	for _, cp := range s.profiles {
		e, err := inventory.Spoke(cp, file, s.pins)
		switch {
		case errors.Is(err, inventory.ErrNotListed):
			notListed++
		case err != nil:
			refused[cp.Name] = err.Error()
			if s.refused[cp.Name] != err.Error() {
				c.log.Warn("ClusterProfile refused: it makes no spoke", "cluster_profile", cp.Namespace+"/"+cp.Name, "error", err)
			}
		default:
			spokes++
			merged.Clusters = append(merged.Clusters, e)
		}
	}
	s.refused = refused
	metrics.ClusterProfiles.WithLabelValues("spoke").Set(float64(spokes))
	metrics.ClusterProfiles.WithLabelValues("refused").Set(float64(len(refused)))
	metrics.ClusterProfiles.WithLabelValues("not_listed").Set(float64(notListed))
	return &merged
}

// inventoryWatcher follows [fleet] cluster_profiles on the hub, as the
// controller's own hub identity (ClusterProfiles get, list and watch in
// that namespace).
func inventoryWatcher(c *parts) (*inventory.Watcher, error) {
	f := c.p.Fleet
	if f.ServerPins == "" {
		c.log.Warn("[fleet] cluster_profiles without server_pins: whoever may write ClusterProfiles in the namespace chooses which server receives each of their spokes' tokens (docs/install.md, A fleet from ClusterProfiles)",
			"namespace", f.ClusterProfiles)
	}
	client, err := cpclient.NewForConfig(rest.CopyConfig(c.hubCfg))
	if err != nil {
		return nil, fmt.Errorf("ClusterProfile client: %w", err)
	}
	return &inventory.Watcher{
		Client: client, Namespace: f.ClusterProfiles, Selector: f.Selector,
		Apply: c.reloadProfiles, Log: c.log.With("component", "inventory"),
	}, nil
}

var _ runnable = (*inventory.Watcher)(nil)

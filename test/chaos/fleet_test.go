package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
)

// spokeHolder is the holder of spoke's Lease on the hub.
func spokeHolder(ctx context.Context, s *devstack.Stack, spoke string) (string, error) {
	l, err := s.Hub.Client.CoordinationV1().Leases(devstack.HubNamespace).Get(ctx, devstack.Instance+"-leader-spoke-"+spoke, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	return ptr.Deref(l.Spec.HolderIdentity, ""), nil
}

// runsSpoke reports whether replica r runs spoke's loops now.
func runsSpoke(ctx context.Context, r devstack.Replica, spoke string) bool {
	sums, err := metricSums(ctx, r.MetricsURL)
	return err == nil && sums[`crucible_cluster_loops{cluster="`+spoke+`"}`] == 1
}

// Two replicas share the spokes (a Lease each), one
// PostgreSQL, submits to both in turn. The replica running wharf's loops
// is SIGKILLed; once wharf's Lease has expired the other takes it (read
// from the Lease), and the killed one is started again. No pod runs twice,
// nothing is lost, every row ends.
func TestChaos13ShardedReplicaKilled(t *testing.T) {
	var ms []devstack.Replica
	scenario{
		num: 13, name: "HA: a replica killed while the spokes are sharded",
		alone:    true,
		injected: fmt.Sprintf("two replicas sharing the spokes by a Lease each (lease %s, one PostgreSQL); SIGKILL of the replica running wharf at a seeded moment of the wave, restarted once the other holds wharf's Lease", haLease),
		expected: "wharf's Lease changes holder once it expires and its loops run on the other replica; every accepted pod runs once, ends succeeded with its log and artifact; only submits in flight at the kill go unanswered",
		spread:   time.Duration(faultsFor(10, 40)) * time.Second,
		stack: func(t *testing.T) *devstack.Stack {
			opts := stackOptions()
			opts.Progress = func(string, ...any) {}
			opts.LeaderElect, opts.LeaseDuration = true, haLease
			s, _ := devstacktest.StartOnPostgres(t, opts)
			a, b := devstacktest.Replicas(t, s)
			ms = []devstack.Replica{a, b}
			return s
		},
		setup: func(t *testing.T, s *devstack.Stack, w *wave) {
			w.c.bases = []string{ms[0].InternalURL, ms[1].InternalURL}
		},
		inject: func(ctx context.Context, t *testing.T, s *devstack.Stack, r *rand.Rand, w *wave) (int, error) {
			n := faultsFor(1, 3)
			for i := range n {
				between(ctx, r, time.Second, time.Duration(faultsFor(6, 20))*time.Second)
				var owner, other devstack.Replica
				if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*haTakeover, true, func(ctx context.Context) (bool, error) {
					for j, m := range ms {
						if runsSpoke(ctx, m, "wharf") {
							owner, other = m, ms[1-j]
							return true, nil
						}
					}
					return false, nil
				}); err != nil {
					return i, fmt.Errorf("no replica runs wharf: %w", err)
				}
				holder, err := spokeHolder(ctx, s, "wharf")
				if err != nil {
					return i, err
				}
				killed := time.Now()
				if err := s.KillProcess(owner.Process); err != nil {
					return i, err
				}
				if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*haTakeover, true, func(ctx context.Context) (bool, error) {
					now, err := spokeHolder(ctx, s, "wharf")
					return err == nil && now != holder && now != "" && runsSpoke(ctx, other, "wharf"), nil
				}); err != nil {
					return i, fmt.Errorf("wharf's Lease never moved from %s to %s: %w", owner.Process, other.Process, err)
				}
				w.note("kill %d: wharf's Lease moved from %s to %s %s after the SIGKILL (lease %s)", i+1, owner.Process, other.Process,
					time.Since(killed).Round(100*time.Millisecond), haLease)
				if err := s.RestartProcess(context.WithoutCancel(ctx), owner.Process, ready(owner)); err != nil {
					return i, err
				}
			}
			return n, nil
		},
	}.run(t)
}

// writeProfile replaces the controller's profile as a ConfigMap volume's
// update does: a new file renamed over the old one.
func writeProfile(s *devstack.Stack, spokes ...string) error {
	text, err := s.ControllerProfile(spokes...)
	if err != nil {
		return err
	}
	path := s.Federation.ProfileFile
	if err := os.WriteFile(path+".new", []byte(text), 0o644); err != nil {
		return err
	}
	return os.Rename(path+".new", path)
}

// clusterNames is /api/clusters' names, and whether dock drains.
func clusterNames(ctx context.Context, c *client) ([]string, bool, error) {
	code, _, body, err := c.do(ctx, http.MethodGet, "/api/clusters", nil)
	if err != nil {
		return nil, false, fmt.Errorf("clusters: %w", err)
	}
	if code != http.StatusOK {
		return nil, false, fmt.Errorf("clusters: %d %s", code, body)
	}
	var cs []apiv1.Cluster
	if err := json.Unmarshal(body, &cs); err != nil {
		return nil, false, err
	}
	var names []string
	draining := false
	for _, cl := range cs {
		names = append(names, cl.Name)
		draining = draining || (cl.Name == "dock" && cl.Draining)
	}
	return names, draining, nil
}

// dock is removed from the running controller's profile in the middle of
// the wave (a reload, no restart): submits go to wharf from then on, dock's
// pods in flight drain to their end, and dock is forgotten; then it is
// added back.
func TestChaos14SpokeRemovedUnderLoad(t *testing.T) {
	var toWharf atomic.Bool
	scenario{
		num: 14, name: "a spoke removed from the profile under load",
		injected: "dock removed from the running controller's profile at a seeded moment (file rewritten, reloaded without a restart), submits then steered to wharf; once dock drained and was forgotten, added back",
		expected: "dock drains: every pod it had runs to its end with its log and artifact, none lost; no submit refused; the controller's process is the same throughout; dock, added back, is in the fleet again",
		spread:   time.Duration(faultsFor(12, 40)) * time.Second,
		stack: func(t *testing.T) *devstack.Stack {
			opts := stackOptions()
			opts.Progress = func(string, ...any) {}
			return devstacktest.Start(t, opts)
		},
		setup: func(t *testing.T, s *devstack.Stack, w *wave) {
			w.target = func(i int) string {
				if toWharf.Load() {
					return "wharf"
				}
				return s.Spokes[i%len(s.Spokes)].Name
			}
		},
		inject: func(ctx context.Context, t *testing.T, s *devstack.Stack, r *rand.Rand, w *wave) (int, error) {
			pid := s.Processes()["crucible-controller"]
			between(ctx, r, 2*time.Second, time.Duration(faultsFor(6, 20))*time.Second)
			toWharf.Store(true)
			time.Sleep(time.Second) // the submits already aimed at dock are answered
			removed := time.Now()
			if err := writeProfile(s, "wharf"); err != nil {
				return 0, err
			}
			var names []string
			var draining bool
			sawDraining := false
			if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
				var err error
				names, draining, err = clusterNames(ctx, w.c)
				sawDraining = sawDraining || draining
				return err == nil && !slices.Contains(names, "dock"), nil
			}); err != nil {
				return 1, fmt.Errorf("dock never drained and left the fleet: %v (draining %v)", names, draining)
			}
			w.note("dock removed: drained and forgotten %s after the file was written (seen draining: %v)", time.Since(removed).Round(100*time.Millisecond), sawDraining)
			if err := writeProfile(s, "wharf", "dock"); err != nil {
				return 1, err
			}
			if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
				names, _, err := clusterNames(ctx, w.c)
				return err == nil && slices.Contains(names, "dock"), nil
			}); err != nil {
				return 1, fmt.Errorf("dock never came back: %w", err)
			}
			toWharf.Store(false)
			if got := s.Processes()["crucible-controller"]; got != pid {
				w.problem("the controller's pid changed from %d to %d: it restarted", pid, got)
			}
			return 1, nil
		},
	}.run(t)
}

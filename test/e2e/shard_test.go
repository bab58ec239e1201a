package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
)

// spokeLease is a spoke's Lease as the hub has it: its holder and epoch.
type spokeLease struct {
	holder string
	epoch  int32
}

// spokeLeases reads the Lease of each spoke from the hub.
func spokeLeases(t testing.TB, s *devstack.Stack, spokes ...string) map[string]spokeLease {
	t.Helper()
	out := map[string]spokeLease{}
	for _, name := range spokes {
		l, err := s.Hub.Client.CoordinationV1().Leases(devstack.HubNamespace).Get(t.Context(), devstack.Instance+"-leader-spoke-"+name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		out[name] = spokeLease{holder: ptr.Deref(l.Spec.HolderIdentity, ""), epoch: ptr.Deref(l.Spec.LeaseTransitions, 0)}
	}
	return out
}

// ownersVia is /api/clusters' owner of each cluster, on replica r.
func ownersVia(t *testing.T, r devstack.Replica) map[string]string {
	t.Helper()
	code, body := haCall(t, r, http.MethodGet, "/api/clusters", nil)
	var cs []apiv1.Cluster
	if code != http.StatusOK || json.Unmarshal(body, &cs) != nil {
		t.Fatalf("%s: /api/clusters %d %s", r.Process, code, body)
	}
	out := map[string]string{}
	for _, c := range cs {
		out[c.Name] = c.Owner
	}
	return out
}

// With leader election, two replicas share three spokes:
// every spoke's Lease has one holder, both replicas hold one or two, and
// both APIs name the same owners. A replica SIGSTOPped past its leases
// loses them (the Leases change holder, their epochs grow) and, resumed,
// runs none of the spokes it lost; a replica SIGKILLed with pods in flight
// hands its spokes over once its Leases expire (read from the Leases). Every
// pod completes once: the pod uid it was dispatched with is the one that
// ran, and its log is collected.
func TestShardedReplicasShareSpokes(t *testing.T) {
	t.Parallel() // a stack of its own: see doc.go
	spokes := []string{"wharf", "dock", "pier"}
	s, _ := ownStackOnPostgres(t, devstack.Options{
		Crucible: devstacktest.BuildCrucible, LeaderElect: true, LeaseDuration: haLease,
		SweepInterval: time.Hour, OrphanGrace: time.Hour, RetryBudget: 30 * time.Second,
		Spokes: devstack.NamedSpokes(spokes...),
	})
	a, b := devstacktest.Replicas(t, s)
	byOwner := func(ls map[string]spokeLease) map[string]int {
		n := map[string]int{}
		for _, l := range ls {
			n[l.holder]++
		}
		return n
	}
	var leases map[string]spokeLease
	waitShared := func(what string, ok func(map[string]spokeLease) bool) {
		t.Helper()
		err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, 3*haTakeover, true, func(context.Context) (bool, error) {
			leases = spokeLeases(t, s, spokes...)
			return ok(leases), nil
		})
		if err != nil {
			t.Fatalf("spoke Leases never %s: %+v", what, leases)
		}
	}
	balanced := func(ls map[string]spokeLease) bool {
		n := byOwner(ls)
		if len(ls) != len(spokes) || len(n) != 2 || n[""] != 0 {
			return false
		}
		for _, c := range n {
			if c < 1 || c > 2 {
				return false
			}
		}
		return true
	}
	waitShared("shared by both replicas", balanced)
	err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, haTakeover, true, func(context.Context) (bool, error) {
		for _, r := range []devstack.Replica{a, b} {
			owners := ownersVia(t, r)
			for _, name := range spokes {
				if owners[name] != spokeLeases(t, s, name)[name].holder {
					return false, nil
				}
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the replicas' /api/clusters never named the Leases' holders: %v, %v; leases %+v", ownersVia(t, a), ownersVia(t, b), leases)
	}
	t.Logf("spokes shared: %+v", leases)

	// SIGSTOP the replica running wharf past its leases: the other takes
	// its spokes.
	paused, pausedHolder := a, leases["wharf"].holder
	if controllerMetricOf(t, b, `crucible_cluster_loops{cluster="wharf"}`) == 1 {
		paused = b
	}
	before := leases
	if err := s.PauseProcess(paused.Process); err != nil {
		t.Fatal(err)
	}
	waitShared("all held by the running replica", func(ls map[string]spokeLease) bool {
		n := byOwner(ls)
		return len(ls) == len(spokes) && len(n) == 1 && n[pausedHolder] == 0 && n[""] == 0
	})
	for name, l := range leases {
		if before[name].holder == pausedHolder && l.epoch <= before[name].epoch {
			t.Errorf("%s changed holder with its epoch %d → %d: it must grow", name, before[name].epoch, l.epoch)
		}
	}
	if err := s.ResumeProcess(paused.Process); err != nil {
		t.Fatal(err)
	}
	// Resumed, it stops the loops of every spoke it lost (its store writes
	// meanwhile are refused by the epoch fence, the store's own tests'
	// part) unless it wins the spoke back.
	for _, name := range spokes {
		if before[name].holder == pausedHolder {
			waitStopped(t, s, paused, pausedHolder, name)
		}
	}
	waitShared("shared again after the resume", balanced)

	// 30 pods in flight over the three spokes, through both replicas; then
	// the replica holding wharf is SIGKILLed.
	const pods = 30
	ids, uids := submitVia(t, []devstack.Replica{a, b}, pods, 0, func(i int) apiv1.SubmitRequest {
		return apiv1.SubmitRequest{Cluster: spokes[i%len(spokes)], Image: "x", Command: []string{"sh", "-c", "echo start; sleep 4; echo done"}}
	})
	victim, survivor := a, b
	if controllerMetricOf(t, b, `crucible_cluster_loops{cluster="wharf"}`) == 1 {
		victim, survivor = b, a
	}
	victimHolder := spokeLeases(t, s, "wharf")["wharf"].holder
	if err := s.KillProcess(victim.Process); err != nil {
		t.Fatal(err)
	}
	waitShared("taken over from the killed replica", func(ls map[string]spokeLease) bool {
		n := byOwner(ls)
		return len(ls) == len(spokes) && len(n) == 1 && n[victimHolder] == 0 && n[""] == 0
	})
	awaitSucceededOnce(t, survivor, ids, uids, 3*time.Minute)
}

// waitStopped waits until replica r, whose Lease identity is holder, runs
// spoke's loops no more (crucible_cluster_loops 0) or holds spoke's Lease
// again. The gauge drops once the loops have wound down, moments after a
// resumed replica's watchdog cancels them: read at once it may still be 1.
func waitStopped(t *testing.T, s *devstack.Stack, r devstack.Replica, holder, spoke string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return controllerMetricOf(t, r, `crucible_cluster_loops{cluster="`+spoke+`"}`) == 0 || spokeLeases(t, s, spoke)[spoke].holder == holder, nil
	})
	if err != nil {
		t.Errorf("%s, resumed, still runs %s's loops 30 s later while the Lease names another holder", r.Process, spoke)
	}
}

// controllerMetricOf is the value of series (a metric name with its
// labels, exactly as exposed) on replica r, 0 while it is absent.
func controllerMetricOf(t *testing.T, r devstack.Replica, series string) float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	return seriesValue(t, getBody(t, ctx, http.DefaultClient, r.MetricsURL+"/metrics"), series)
}

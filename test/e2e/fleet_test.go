//go:build fleet

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
)

// fleetPods is how many turn pods TestFleetOfTenSpokes runs.
const fleetPods = 1000

// Ten spokes and one controller (issue 26's acceptance, make fleet): 1,000
// turn pods spread over all of them complete with their logs; after the
// first 300, one reload removes dock, which drains, and adds an eleventh
// spoke whose token comes from the hub's TokenRequest API, which then
// receives pods — with no restart (the controller's pid is unchanged) and
// nothing lost. It reports the controller's memory per spoke and how long
// the new spoke took from the reload to its first dispatched pod.
func TestFleetOfTenSpokes(t *testing.T) {
	names := devstack.SpokeNames(11)
	spokes := devstack.NamedSpokes(names...)
	spokes[10].Unlisted, spokes[10].TokenRequest = true, true
	s := devstacktest.Start(t, devstack.Options{Crucible: devstacktest.BuildCrucible, Spokes: spokes})
	pid := s.Processes()["crucible-controller"]
	rssBefore := processRSS(t, pid)

	var (
		reloaded  atomic.Bool
		reloadAt  time.Time
		firstNew  atomic.Int64 // unix nanos of spoke-11's first 201
		mu        sync.Mutex
		ids       = make([]string, fleetPods)
		perSpoke  = map[string]int{}
		submitErr error
	)
	client := &http.Client{Timeout: time.Minute}
	runID := strconv.FormatInt(time.Now().UnixNano(), 36)
	submitOne := func(ctx context.Context, i int) error {
		target := names[i%10]
		if reloaded.Load() && target == "dock" {
			target = names[10] // dock takes no more pods: its share goes to the new spoke
		}
		req := apiv1.SubmitRequest{Cluster: target, Image: "x", Command: []string{"sh", "-c", "echo turn " + strconv.Itoa(i)}}
		code, body, err := postSubmit(ctx, client, s.Federation.ControllerInternalURL, req, fmt.Sprintf("fleet-%s-%d", runID, i))
		if err != nil {
			return fmt.Errorf("submit %d to %s: %w", i, target, err)
		}
		var wp apiv1.WorkPod
		if code != http.StatusCreated || json.Unmarshal(body, &wp) != nil {
			return fmt.Errorf("submit %d to %s: %d %s", i, target, code, body)
		}
		if target == names[10] {
			firstNew.CompareAndSwap(0, time.Now().UnixNano())
		}
		mu.Lock()
		ids[i] = wp.ID
		perSpoke[target]++
		mu.Unlock()
		return nil
	}
	run := func(from, to int) {
		t.Helper()
		if _, err := createLoop(t.Context(), 8, from, to, submitOne); err != nil {
			submitErr = err
		}
	}
	started := time.Now()
	run(0, 300)
	if submitErr != nil {
		t.Fatal(submitErr)
	}

	// One reload: dock out, spoke-11 in.
	var listed []string
	for _, n := range names[:10] {
		if n != "dock" {
			listed = append(listed, n)
		}
	}
	writeProfile(t, s, controllerProfile(t, s, append(listed, names[10])...))
	reloadAt = time.Now()
	waitReloads(t, s, "applied", 1)
	waitClusters(t, s, names[10]+" healthy", func(cs []apiv1.Cluster) bool {
		c, ok := clusterNamed(cs, names[10])
		return ok && c.Health.CredentialsValid
	})
	reloaded.Store(true)
	run(300, fleetPods)
	if submitErr != nil {
		t.Fatal(submitErr)
	}
	submitted := time.Since(started)

	// Every pod ends succeeded with its log, dock's drained ones included.
	var pending []string
	err := wait.PollUntilContextTimeout(t.Context(), 2*time.Second, 15*time.Minute, true, func(context.Context) (bool, error) {
		pending = pending[:0]
		for _, id := range ids {
			code, body := apiCall(t, s, http.MethodGet, "/api/pods/"+id, nil)
			var wp apiv1.WorkPod
			if code != http.StatusOK || json.Unmarshal(body, &wp) != nil {
				return false, fmt.Errorf("get %s: %d %s", id, code, body)
			}
			if wp.State != "succeeded" || !wp.LogCollected {
				if wp.State == "failed" || wp.State == "lost" || wp.State == "cancelled" {
					return false, fmt.Errorf("%s on %s: %s (%s)", id, wp.Cluster, wp.State, wp.Reason)
				}
				pending = append(pending, id)
			}
		}
		return len(pending) == 0, nil
	})
	if err != nil {
		t.Fatalf("%d pods not done (first %v): %v", len(pending), pending[:min(len(pending), 5)], err)
	}
	done := time.Since(started)
	waitClusters(t, s, "without dock", func(cs []apiv1.Cluster) bool {
		_, ok := clusterNamed(cs, "dock")
		return !ok && len(cs) == 10
	})
	if got := s.Processes()["crucible-controller"]; got != pid {
		t.Errorf("the controller's pid is %d, was %d: it restarted", got, pid)
	}
	if perSpoke[names[10]] == 0 || perSpoke["dock"] == 0 {
		t.Errorf("pods per spoke %v: want some on dock before the reload and on %s after", perSpoke, names[10])
	}
	for _, id := range ids[:5] {
		if log := podLog(t, s, id); !strings.Contains(log, "turn ") {
			t.Errorf("%s: log %q", id, log)
		}
	}
	rssAfter := processRSS(t, pid)
	t.Logf("fleet: %d pods over %d spokes (%v) submitted in %s, all succeeded with logs in %s (%.1f pods/s); %s's first pod %s after the reload; controller RSS %d MiB at start (10 spokes), %d MiB at the end (11 clients, 10 spokes)",
		fleetPods, len(perSpoke), perSpoke, submitted.Round(time.Second), done.Round(time.Second), float64(fleetPods)/done.Seconds(),
		names[10], time.Unix(0, firstNew.Load()).Sub(reloadAt).Round(10*time.Millisecond), rssBefore>>20, rssAfter>>20)
}

// processRSS is pid's resident set in bytes.
func processRSS(t *testing.T, pid int) int64 {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS for pid %d", pid)
	return 0
}

// Three replicas share ten spokes (a Lease each, one
// PostgreSQL; issue 26's acceptance): each runs the loops of 3 or 4, as
// the Leases on the hub say. With 300 pods in flight one replica is
// SIGKILLed: its spokes' Leases change holder once they expire (read from
// the Lease objects), and every pod completes once with its log. A fourth
// replica joining takes some spokes; one SIGSTOPped past its leases and
// resumed runs none of the spokes it lost.
func TestFleetShardedOverThreeReplicas(t *testing.T) {
	names := devstack.SpokeNames(10)
	s, _ := devstacktest.StartOnPostgres(t, devstack.Options{
		Crucible: devstacktest.BuildCrucible, LeaderElect: true, LeaseDuration: haLease,
		SweepInterval: time.Hour, OrphanGrace: time.Hour, RetryBudget: 30 * time.Second,
		Spokes: devstack.NamedSpokes(names...),
	})
	a, b := devstacktest.Replicas(t, s)
	c, err := s.StartController(t.Context(), "c")
	if err != nil {
		t.Fatal(err)
	}
	replicas := []devstack.Replica{a, b, *c}
	var leases map[string]spokeLease
	shared := func(what string, ok func(map[string]int) bool) {
		t.Helper()
		err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, 4*haTakeover, true, func(context.Context) (bool, error) {
			leases = spokeLeases(t, s, names...)
			n := map[string]int{}
			for _, l := range leases {
				n[l.holder]++
			}
			return len(leases) == len(names) && n[""] == 0 && ok(n), nil
		})
		if err != nil {
			t.Fatalf("spoke Leases never %s: %+v", what, leases)
		}
	}
	each := func(lo, hi, holders int) func(map[string]int) bool {
		return func(n map[string]int) bool {
			if len(n) != holders {
				return false
			}
			for _, k := range n {
				if k < lo || k > hi {
					return false
				}
			}
			return true
		}
	}
	shared("3-4 on each of three replicas", each(3, 4, 3))
	t.Logf("three replicas: %+v", leases)

	// 300 pods in flight through all three, then the replica running wharf
	// is killed.
	const pods = 300
	ids, uids := submitVia(t, replicas, pods, 8, func(i int) apiv1.SubmitRequest {
		return apiv1.SubmitRequest{Cluster: names[i%len(names)], Image: "x", Command: []string{"sh", "-c", "echo start; sleep 3; echo done"}}
	})
	victim := replicas[0]
	for _, r := range replicas {
		if controllerMetricOf(t, r, `crucible_cluster_loops{cluster="wharf"}`) == 1 {
			victim = r
		}
	}
	victimHolder := leases["wharf"].holder
	if err := s.KillProcess(victim.Process); err != nil {
		t.Fatal(err)
	}
	var survivors []devstack.Replica
	for _, r := range replicas {
		if r != victim {
			survivors = append(survivors, r)
		}
	}
	shared("taken over by the two survivors", func(n map[string]int) bool { return n[victimHolder] == 0 && each(5, 5, 2)(n) })
	awaitSucceededOnce(t, survivors[0], ids, uids, 5*time.Minute)

	// A fourth replica joins and takes some spokes.
	d, err := s.StartController(t.Context(), "d")
	if err != nil {
		t.Fatal(err)
	}
	shared("3-4 on each of three replicas again, the new one among them", func(n map[string]int) bool {
		return each(3, 4, 3)(n) && runsSome(t, *d, names)
	})

	// One SIGSTOPped past its leases loses them; resumed, it runs none of
	// them until it wins some back.
	paused := *d
	var held []string
	for _, n := range names {
		if controllerMetricOf(t, paused, `crucible_cluster_loops{cluster="`+n+`"}`) == 1 {
			held = append(held, n)
		}
	}
	pausedHolder := leases[held[0]].holder
	if err := s.PauseProcess(paused.Process); err != nil {
		t.Fatal(err)
	}
	shared("taken from the paused replica", func(n map[string]int) bool { return n[pausedHolder] == 0 && each(5, 5, 2)(n) })
	if err := s.ResumeProcess(paused.Process); err != nil {
		t.Fatal(err)
	}
	for _, n := range held {
		waitStopped(t, s, paused, pausedHolder, n)
	}
	t.Logf("sharded fleet: %d pods over %d spokes through 3 replicas, all succeeded once after %s's SIGKILL; spokes after the pause: %+v", pods, len(names), victim.Process, spokeLeases(t, s, names...))
}

// runsSome reports whether replica r runs the loops of at least one of
// spokes.
func runsSome(t *testing.T, r devstack.Replica, spokes []string) bool {
	t.Helper()
	for _, n := range spokes {
		if controllerMetricOf(t, r, `crucible_cluster_loops{cluster="`+n+`"}`) == 1 {
			return true
		}
	}
	return false
}

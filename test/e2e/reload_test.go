package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
)

// writeProfile replaces the controller's profile the way a ConfigMap
// volume's update does: a new file renamed over the old one.
func writeProfile(t *testing.T, s *devstack.Stack, text string) {
	t.Helper()
	replaceProfile(t, s.Federation.ProfileFile, text)
}

// replaceProfile is writeProfile for the profile at path (any replica's).
func replaceProfile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path+".new", []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
}

// controllerProfile is the stack's controller profile listing spokes.
func controllerProfile(t *testing.T, s *devstack.Stack, spokes ...string) string {
	t.Helper()
	text, err := s.ControllerProfile(spokes...)
	if err != nil {
		t.Fatal(err)
	}
	return text
}

// listClusters is /api/clusters.
func listClusters(t *testing.T, s *devstack.Stack) []apiv1.Cluster {
	t.Helper()
	code, body := apiCall(t, s, http.MethodGet, "/api/clusters", nil)
	var clusters []apiv1.Cluster
	if err := json.Unmarshal(body, &clusters); code != http.StatusOK || err != nil {
		t.Fatalf("clusters: %d %s (%v)", code, body, err)
	}
	return clusters
}

// waitClusters polls /api/clusters until ok accepts it.
func waitClusters(t *testing.T, s *devstack.Stack, what string, ok func([]apiv1.Cluster) bool) {
	t.Helper()
	var last []apiv1.Cluster
	err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
		last = listClusters(t, s)
		return ok(last), nil
	})
	if err != nil {
		t.Fatalf("/api/clusters never %s: %+v", what, last)
	}
}

// waitReloads waits for crucible_profile_reloads_total{outcome} to reach n.
func waitReloads(t *testing.T, s *devstack.Stack, outcome string, n float64) {
	t.Helper()
	series := `crucible_profile_reloads_total{outcome="` + outcome + `"}`
	var got float64
	err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		got = controllerMetricValue(t, s, series)
		return got >= n, nil
	})
	if err != nil || got != n {
		t.Fatalf("%s = %v, want %v (%v)", series, got, n, err)
	}
}

// controllerLogHas reports whether the controller's log has a line with
// every one of parts.
func controllerLogHas(t *testing.T, s *devstack.Stack, parts ...string) bool {
	t.Helper()
	data, err := os.ReadFile(s.LogFile("crucible-controller"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(line, p) }) {
			return true
		}
	}
	return false
}

func clusterNamed(clusters []apiv1.Cluster, name string) (apiv1.Cluster, bool) {
	i := slices.IndexFunc(clusters, func(c apiv1.Cluster) bool { return c.Name == name })
	if i < 0 {
		return apiv1.Cluster{}, false
	}
	return clusters[i], true
}

// A running controller takes spokes from a changed profile, with no
// restart (its process id stays): in one reload pier is added (its token
// from the hub's TokenRequest API: no new file, no volume; its pods upload
// to the drop-box), wharf's entry
// changes while a pod runs there (its loops move to the new client, and
// the pod's end is still seen, with its log), and dock is removed while two
// pods run on it: nothing new goes to dock, the pod that ends within the
// drain timeout succeeds with its log, the one that does not is lost
// saying why, and then dock is gone. A profile with a bad entry, and one
// that changes a key only a restart applies, are refused naming the key,
// and the fleet is left as it was; SIGHUP reloads the file again.
func TestProfileReloadAddsChangesAndDrainsSpokes(t *testing.T) {
	t.Parallel() // a stack of its own: see doc.go
	s := ownStack(t, devstack.Options{Crucible: devstacktest.BuildCrucible, DrainTimeout: 20 * time.Second,
		Spokes: []devstack.SpokeOptions{{Name: "wharf"}, {Name: "dock"}, {Name: "pier", TokenRequest: true, Unlisted: true}}})
	pid := s.Processes()["crucible-controller"]
	if _, ok := clusterNamed(listClusters(t, s), "pier"); ok {
		t.Fatal("pier is in the fleet before the reload")
	}

	onWharf := submit(t, s, apiv1.SubmitRequest{Cluster: "wharf", Image: "registry.example/turn:1", Command: []string{"sh", "-c", "sleep 6; echo wharf-done"}})
	ends := submit(t, s, apiv1.SubmitRequest{Cluster: "dock", Image: "registry.example/turn:1", Command: []string{"sh", "-c", "sleep 6; echo dock-done"}})
	stuck := submit(t, s, apiv1.SubmitRequest{Cluster: "dock", Image: "registry.example/turn:1", Command: sleeps("10m")})
	for _, id := range []string{onWharf.ID, ends.ID, stuck.ID} {
		waitRunning(t, s, id)
	}

	next := controllerProfile(t, s, "wharf", "pier")
	next = strings.Replace(next, "name = \"wharf\"\n", "name = \"wharf\"\nqps = 7\n", 1)
	writeProfile(t, s, next)
	waitReloads(t, s, "applied", 1)
	waitClusters(t, s, "pier healthy and dock draining", func(cs []apiv1.Cluster) bool {
		pier, ok := clusterNamed(cs, "pier")
		dock, dok := clusterNamed(cs, "dock")
		return ok && !pier.Draining && pier.Health.CredentialsValid && dok && dock.Draining
	})
	if !controllerLogHas(t, s, "profile reloaded", `"added":["pier"]`, `"changed":["wharf"]`, `"removed":["dock"]`) {
		t.Error("no log line of the reload naming what it added, changed and removed")
	}

	// pier takes pods; dock takes none.
	onPier := submit(t, s, apiv1.SubmitRequest{Cluster: "pier", Image: "registry.example/turn:1",
		Command: []string{"sh", "-c", "printf from-pier > out.json && crucible push result out.json && echo pier-done"}})
	code, body := apiCall(t, s, http.MethodPost, "/api/pods", apiv1.SubmitRequest{Cluster: "dock", Image: "registry.example/turn:1", Command: []string{"true"}})
	if code != http.StatusBadRequest || !strings.Contains(string(body), `cluster \"dock\": no such cluster (known: wharf, pier)`) {
		t.Errorf("submit to the draining dock: %d %s, want 400 naming the known clusters", code, body)
	}
	for id, out := range map[string]string{onPier.ID: "pier-done", onWharf.ID: "wharf-done", ends.ID: "dock-done"} {
		waitState(t, s, id, "succeeded", 2*time.Minute)
		if log := podLog(t, s, id); !strings.Contains(log, out) {
			t.Errorf("%s: log %q, want %q", id, log, out)
		}
	}
	// The drop-box took pier's pod's upload: its validator came with the reload.
	if code, body := apiCall(t, s, http.MethodGet, "/api/pods/"+onPier.ID+"/artifacts/result", nil); code != http.StatusOK || string(body) != "from-pier" {
		t.Errorf("pier's pushed artifact: %d %q, want 200 from-pier", code, body)
	}
	lost := waitState(t, s, stuck.ID, "lost", 2*time.Minute)
	if !strings.Contains(lost.Reason, "cluster dock was removed from the profile") || !strings.Contains(lost.Reason, "drain timeout (20s)") {
		t.Errorf("the pod past dock's drain: reason %q", lost.Reason)
	}
	// Its pod goes with the verdict: nothing else would remove it from a
	// spoke the controller no longer watches.
	if err := waitPodGone(t, s.Spoke("dock"), stuck.ID, time.Minute); err != nil {
		t.Errorf("the pod of %s, lost past dock's drain, is still on dock: %v", stuck.ID, err)
	}
	waitClusters(t, s, "without dock", func(cs []apiv1.Cluster) bool {
		_, ok := clusterNamed(cs, "dock")
		return !ok && len(cs) == 2
	})

	// A bad entry: refused with its key path; the fleet is unchanged.
	good := next
	writeProfile(t, s, strings.Replace(good, "name = \"pier\"\n", "name = \"pier\"\nqps = -1\n", 1))
	waitReloads(t, s, "invalid", 1)
	if !controllerLogHas(t, s, "profile reload refused", "clusters[1].qps") {
		t.Error("the refused reload's log line does not name clusters[1].qps")
	}
	// A key only a restart applies: refused naming it.
	writeProfile(t, s, strings.Replace(good, `max_backoff = "2s"`, `max_backoff = "3s"`, 1))
	waitReloads(t, s, "restart_needed", 1)
	if !controllerLogHas(t, s, "restart needed for reconcile.max_backoff") {
		t.Error("the refused reload's log line does not name reconcile.max_backoff")
	}
	if names := clusterNames(listClusters(t, s)); !slices.Equal(names, []string{"wharf", "pier"}) {
		t.Errorf("clusters after refused reloads: %v, want wharf, pier", names)
	}
	again := submit(t, s, apiv1.SubmitRequest{Cluster: "pier", Image: "registry.example/turn:1", Command: []string{"echo", "still"}})
	waitState(t, s, again.ID, "succeeded", 2*time.Minute)

	// The good file again, then SIGHUP: both reload, neither changes a thing.
	writeProfile(t, s, good)
	waitReloads(t, s, "unchanged", 1)
	if err := s.HangUpProcess("crucible-controller"); err != nil {
		t.Fatal(err)
	}
	waitReloads(t, s, "unchanged", 2)
	if got := s.Processes()["crucible-controller"]; got != pid {
		t.Errorf("the controller's pid is %d, was %d: it restarted", got, pid)
	}
}

func clusterNames(cs []apiv1.Cluster) []string {
	var names []string
	for _, c := range cs {
		names = append(names, c.Name)
	}
	return names
}

// podLog is work pod id's collected log.
func podLog(t *testing.T, s *devstack.Stack, id string) string {
	t.Helper()
	code, body := apiCall(t, s, http.MethodGet, "/api/pods/"+id+"/artifacts/log", nil)
	if code != http.StatusOK {
		t.Fatalf("log of %s: %d %s", id, code, body)
	}
	return string(body)
}

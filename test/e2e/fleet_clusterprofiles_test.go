package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	cpv1alpha1 "sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/testpki"
)

// A fleet read from ClusterProfiles (issue 42 item 3), on the dev hub: the
// controller's profile lists wharf and reads the ClusterProfiles of
// namespace fleet labelled crucible.dev/fleet=dev. Publishing dock's, as a
// cluster manager would, adds dock — its token requested from the hub with
// dock's audience, its pods run and log — while ClusterProfiles outside the
// selector or the namespace, one for another consumer and one that would
// send dock's token through a proxy change nothing; moving dock's server
// moves its client; deleting it drains dock. The process never restarts.
func TestClusterProfilesMakeTheFleet(t *testing.T) {
	t.Parallel() // a stack of its own: see doc.go
	const ns, label = "fleet", "crucible.dev/fleet"
	s := ownStack(t, devstack.Options{Crucible: devstacktest.BuildCrucible, DrainTimeout: 20 * time.Second,
		ClusterProfiles: ns, ClusterProfileSelector: label + "=dev",
		Spokes: []devstack.SpokeOptions{{Name: "wharf"}, {Name: "dock", Unlisted: true}}})
	pid := s.Processes()["crucible-controller"]
	dock := s.Spoke("dock")
	client, err := s.ClusterProfiles()
	if err != nil {
		t.Fatal(err)
	}
	profileOf := func(name, namespace string, labelled bool) *cpv1alpha1.ClusterProfile {
		cp, err := s.ClusterProfile(&devstack.Cluster{Name: name, Server: dock.Server}, namespace)
		if err != nil {
			t.Fatal(err)
		}
		if labelled {
			cp.Labels[label] = "dev"
		}
		return cp
	}
	ensureNamespace(t, s.Hub, "elsewhere")
	publish := func(cp *cpv1alpha1.ClusterProfile) {
		t.Helper()
		if err := s.PublishClusterProfile(t.Context(), cp); err != nil {
			t.Fatal(err)
		}
	}
	// Published first, so that dock's arrival below proves they were seen.
	publish(profileOf("berth", ns, false))        // outside the selector
	publish(profileOf("slip", "elsewhere", true)) // outside the namespace
	other := profileOf("mole", ns, true)          // another consumer's
	other.Status.AccessProviders[0].Name = "kubeconfig"
	publish(other)
	proxied := profileOf("jetty", ns, true) // would send jetty's token through a proxy
	proxied.Status.AccessProviders[0].Cluster.ProxyURL = "http://127.0.0.1:1"
	publish(proxied)

	cp := profileOf("dock", ns, true)
	publish(cp)
	waitClusters(t, s, "with dock healthy", func(cs []apiv1.Cluster) bool {
		d, ok := clusterNamed(cs, "dock")
		return ok && !d.Draining && d.Health.CredentialsValid
	})
	if names := clusterNames(listClusters(t, s)); strings.Join(names, ",") != "wharf,dock" {
		t.Errorf("clusters: %v, want wharf, dock (berth, slip, mole and jetty make no spoke)", names)
	}
	if !controllerLogHas(t, s, "ClusterProfiles changed the fleet", `"added":["dock"]`) {
		t.Error("no log line naming the spoke a ClusterProfile added")
	}
	if !controllerLogHas(t, s, "ClusterProfile refused", "fleet/jetty", "proxy-url is set") {
		t.Error("the proxied ClusterProfile's refusal is not logged with its reason")
	}
	for outcome, want := range map[string]float64{"spoke": 1, "refused": 1, "not_listed": 1} {
		if got := controllerMetricValue(t, s, `crucible_cluster_profiles{outcome="`+outcome+`"}`); got != want {
			t.Errorf("crucible_cluster_profiles{outcome=%q} = %v, want %v", outcome, got, want)
		}
	}
	onDock := submit(t, s, apiv1.SubmitRequest{Cluster: "dock", Image: "registry.example/turn:1",
		Command: []string{"sh", "-c", "printf from-dock > out.json && crucible push result out.json && echo dock-done"}})
	waitState(t, s, onDock.ID, "succeeded", 2*time.Minute)
	if log := podLog(t, s, onDock.ID); !strings.Contains(log, "dock-done") {
		t.Errorf("dock's pod log %q, want dock-done", log)
	}
	if code, body := apiCall(t, s, http.MethodGet, "/api/pods/"+onDock.ID+"/artifacts/result", nil); code != http.StatusOK || string(body) != "from-dock" {
		t.Errorf("dock's pushed artifact: %d %q, want 200 from-dock", code, body)
	}

	// A reload of the profile file keeps the ClusterProfiles' spokes: the
	// file alone would leave dock out.
	if err := s.HangUpProcess("crucible-controller"); err != nil {
		t.Fatal(err)
	}
	waitReloads(t, s, "unchanged", 1)
	if names := clusterNames(listClusters(t, s)); strings.Join(names, ",") != "wharf,dock" {
		t.Errorf("clusters after a reload of the file: %v, want wharf, dock", names)
	}

	// The cluster manager moves dock (the same server by another name) and
	// names its loop namespace: dock's client follows, pods still run.
	moved := strings.Replace(dock.Server, "127.0.0.1", "localhost", 1)
	cp = profileOf("dock", ns, true)
	cp.Status.AccessProviders[0].Cluster.Server = moved
	cp.Status.Properties = append(cp.Status.Properties, cpv1alpha1.Property{Name: profile.PropertyLoopNamespace, Value: devstack.SpokeNamespace})
	publish(cp)
	waitClusters(t, s, "with dock at "+moved, func(cs []apiv1.Cluster) bool {
		d, ok := clusterNamed(cs, "dock")
		return ok && d.Server == moved && d.Health.CredentialsValid
	})
	if !controllerLogHas(t, s, "ClusterProfiles changed the fleet", `"changed":["dock"]`) {
		t.Error("no log line naming the spoke a ClusterProfile changed")
	}
	again := submit(t, s, apiv1.SubmitRequest{Cluster: "dock", Image: "registry.example/turn:1", Command: []string{"echo", "moved"}})
	waitState(t, s, again.ID, "succeeded", 2*time.Minute)

	// Deleted: dock drains and goes; a pod running there still ends well.
	running := submit(t, s, apiv1.SubmitRequest{Cluster: "dock", Image: "registry.example/turn:1", Command: []string{"sh", "-c", "sleep 5; echo drained"}})
	waitRunning(t, s, running.ID)
	if err := client.ApisV1alpha1().ClusterProfiles(ns).Delete(t.Context(), "dock", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitState(t, s, running.ID, "succeeded", 2*time.Minute)
	if log := podLog(t, s, running.ID); !strings.Contains(log, "drained") {
		t.Errorf("the draining pod's log %q, want drained", log)
	}
	waitClusters(t, s, "without dock", func(cs []apiv1.Cluster) bool {
		_, ok := clusterNamed(cs, "dock")
		return !ok && len(cs) == 1
	})
	if got := s.Processes()["crucible-controller"]; got != pid {
		t.Errorf("the controller's pid is %d, was %d: it restarted", got, pid)
	}
}

// With [fleet] server_pins (issue 42, R-SEC1) a ClusterProfile chooses a
// spoke, never where its token goes: dock's published with wharf's server,
// and berth's with no pin, make no spoke and say why; dock's with its
// pinned server and CA becomes a spoke whose pods run; the same object
// turned to another CA stops being one, and dock drains.
func TestClusterProfilesMakeTheFleetPinned(t *testing.T) {
	t.Parallel() // a stack of its own: see doc.go
	const ns = "fleet"
	s := ownStack(t, devstack.Options{Crucible: devstacktest.BuildCrucible, DrainTimeout: 20 * time.Second,
		ClusterProfiles: ns, ClusterProfilePins: true,
		Spokes: []devstack.SpokeOptions{{Name: "wharf"}, {Name: "dock", Unlisted: true}}})
	dock := s.Spoke("dock")
	profileOf := func(name, server string) *cpv1alpha1.ClusterProfile {
		cp, err := s.ClusterProfile(&devstack.Cluster{Name: name, Server: server}, ns)
		if err != nil {
			t.Fatal(err)
		}
		return cp
	}
	publish := func(cp *cpv1alpha1.ClusterProfile) {
		t.Helper()
		if err := s.PublishClusterProfile(t.Context(), cp); err != nil {
			t.Fatal(err)
		}
	}
	waitLog := func(parts ...string) {
		t.Helper()
		err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return controllerLogHas(t, s, parts...), nil
		})
		if err != nil {
			t.Fatalf("no controller log line with %q", parts)
		}
	}
	publish(profileOf("berth", dock.Server))
	publish(profileOf("dock", s.Spoke("wharf").Server))
	waitLog("ClusterProfile refused", "fleet/dock", "server pin check failed", "is not the pinned server")
	waitLog("ClusterProfile refused", "fleet/berth", "no pin for berth")
	if names := clusterNames(listClusters(t, s)); strings.Join(names, ",") != "wharf" {
		t.Errorf("clusters with dock's ClusterProfile pointing elsewhere: %v, want wharf alone", names)
	}

	publish(profileOf("dock", dock.Server))
	waitClusters(t, s, "with dock healthy", func(cs []apiv1.Cluster) bool {
		d, ok := clusterNamed(cs, "dock")
		return ok && d.Health.CredentialsValid
	})
	onDock := submit(t, s, apiv1.SubmitRequest{Cluster: "dock", Image: "registry.example/turn:1", Command: []string{"echo", "pinned"}})
	waitState(t, s, onDock.ID, "succeeded", 2*time.Minute)

	other := profileOf("dock", dock.Server)
	other.Status.AccessProviders[0].Cluster.CertificateAuthorityData = testpki.NewCA(t, "not the stack's").PEM
	publish(other)
	waitLog("ClusterProfile refused", "fleet/dock", "not the pinned CA bundle")
	waitClusters(t, s, "without dock", func(cs []apiv1.Cluster) bool {
		_, ok := clusterNamed(cs, "dock")
		return !ok && len(cs) == 1
	})
}

package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
)

// Spokes sharing an API server (issue 42 item 1): four spokes on two
// servers, each a cluster of its own to the controller — its token for its
// own audience accepted (the controller's health check reads its loop
// namespace with it), its own loop namespace loops-<spoke>, its own
// provider in its server's one webhook — and a pod on every one completes
// with its log, in that spoke's namespace. The stack runs two servers'
// processes, and its costs name each server's guests.
func TestSharedServerSpokes(t *testing.T) {
	t.Parallel() // a stack of its own: see doc.go
	names := devstack.SpokeNames(4)
	s := ownStack(t, devstack.Options{Crucible: devstacktest.BuildCrucible, SpokesPerServer: 2, Spokes: devstack.NamedSpokes(names...)})
	procs := s.Processes()
	for name, want := range map[string]bool{"kube-apiserver-wharf": true, "kube-apiserver-pier": true, "kube-apiserver-dock": false, "kube-apiserver-quay": false,
		"crucible-webhook-wharf": true, "crucible-webhook-dock": false} {
		if _, ok := procs[name]; ok != want {
			t.Errorf("process %s running: %v, want %v", name, ok, want)
		}
	}
	for guest, host := range map[string]string{"dock": "wharf", "quay": "pier"} {
		c := s.Spoke(guest)
		if c.Host != host || c.Server != s.Spoke(host).Server || c.LoopNamespace != "loops-"+guest {
			t.Errorf("%s: host %q server %s loops %q, want %s's server and loops-%s", guest, c.Host, c.Server, c.LoopNamespace, host, guest)
		}
	}
	// One provider in each server's webhook (it routes by issuer), with
	// keys, for every spoke's audience.
	resp, err := http.Get(s.Federation.WebhookMetricsURLs["wharf"] + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	var ready struct {
		Providers []providerReadiness `json:"providers"`
	}
	err = json.NewDecoder(resp.Body).Decode(&ready)
	resp.Body.Close()
	var providers []string
	for _, p := range ready.Providers {
		if p.Ready {
			providers = append(providers, p.Name)
		}
	}
	if err != nil || !slices.Equal(providers, []string{"hub"}) {
		t.Errorf("wharf's webhook's ready providers: %v (%v), want hub", providers, err)
	}
	if cfg, err := os.ReadFile(s.Federation.WebhookConfigFiles["dock"]); err != nil || !strings.Contains(string(cfg), "- wharf\n") || !strings.Contains(string(cfg), "- dock\n") {
		t.Errorf("dock's webhook config (wharf's) does not accept both audiences: %s (%v)", cfg, err)
	}
	waitClusters(t, s, "with four healthy spokes", func(cs []apiv1.Cluster) bool {
		healthy := 0
		for _, c := range cs {
			if c.Health.CredentialsValid && c.LoopNamespace == "loops-"+c.Name {
				healthy++
			}
		}
		return healthy == 4
	})

	ids := map[string]string{}
	for _, name := range names {
		ids[name] = submit(t, s, apiv1.SubmitRequest{Cluster: name, Image: "registry.example/turn:1",
			Command: []string{"sh", "-c", "sleep 3; echo done-on-" + name}}).ID
	}
	for name, id := range ids {
		pod := waitRunningPod(t, s, id)
		if pod.Namespace != "loops-"+name {
			t.Errorf("%s's pod runs in %q, want loops-%s", name, pod.Namespace, name)
		}
		if _, err := s.Spoke(name).Client.CoreV1().Pods("loops-"+name).Get(t.Context(), pod.ID, metav1.GetOptions{}); err != nil {
			t.Errorf("%s's pod %s is not in loops-%s on its server: %v", name, pod.ID, name, err)
		}
	}
	for name, id := range ids {
		waitState(t, s, id, "succeeded", 2*time.Minute)
		if log := podLog(t, s, id); !strings.Contains(log, "done-on-"+name) {
			t.Errorf("%s's pod log %q", name, log)
		}
	}

	costs, err := s.Costs()
	if err != nil {
		t.Fatal(err)
	}
	var servers []string
	for _, c := range costs {
		if c.Spoke != "" {
			servers = append(servers, c.Spoke+"+"+strings.Join(c.Guests, ","))
		}
	}
	if !slices.Equal(servers, []string{"wharf+dock", "pier+quay"}) {
		t.Errorf("costs by server: %v, want wharf+dock, pier+quay", servers)
	}
}

// waitRunningPod waits until the work pod runs and returns it.
func waitRunningPod(t *testing.T, s *devstack.Stack, id string) apiv1.WorkPod {
	t.Helper()
	waitRunning(t, s, id)
	code, body := apiCall(t, s, http.MethodGet, "/api/pods/"+id, nil)
	var pod apiv1.WorkPod
	if err := json.Unmarshal(body, &pod); code != http.StatusOK || err != nil {
		t.Fatalf("get %s: %d %s (%v)", id, code, body, err)
	}
	return pod
}

package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"k8s.io/apimachinery/pkg/util/wait"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
	"crucible.dev/crucible/internal/render"
)

// With auth "kubernetes", run-live reaches the caller's own pods: submitter
// B is refused A's pod with a 403 naming the permission it lacks (create-any
// on workpods/portforward), the admin role holds it, and A reaches its own.
// A profile reload that turns the cluster's run_live off ends A's open
// session with a close reason naming the key.
func TestPortForwardOwnPodsAndRunLiveReload(t *testing.T) {
	t.Parallel() // a stack of its own: see doc.go
	s := ownStack(t, devstack.Options{
		Crucible: devstacktest.BuildCrucible, Spokes: []devstack.SpokeOptions{{Name: "wharf"}},
		MirrorTTL: time.Second, MirrorMaxStale: 8 * time.Second, SweepInterval: 2 * time.Second,
		OrphanGrace: orphanGrace, RetryBudget: 90 * time.Second,
	})
	if !s.PodNetwork {
		t.Skip("this machine gives dev pods no network namespace: run-live is unavailable")
	}
	base, err := os.ReadFile(s.Federation.ProfileFile)
	if err != nil {
		t.Fatal(err)
	}
	applyHub(t, s, render.HubRBAC(devstack.HubNamespace, devstack.HubServiceAccount)...)
	for _, sa := range []struct{ name, role string }{{"pf-a", render.HubSubmitterName}, {"pf-b", render.HubSubmitterName}, {"pf-admin", render.HubAdminName}} {
		hubServiceAccount(t, s, sa.name)
		grant(t, s, sa.name, sa.role, saSubject(sa.name))
	}
	apiSection := "auth = \"kubernetes\"\naccess_allow_ttl = \"1s\"\naccess_deny_ttl = \"1s\"\nstream_recheck = \"1s\"\n"
	withAPISection(t, s, string(base), apiSection)
	bearer := func(sa string) http.Header {
		return http.Header{"Authorization": {"Bearer " + hubToken(t, s, sa, devstack.Issuer)}}
	}
	a := caller{token: hubToken(t, s, "pf-a", devstack.Issuer)}
	ans := a.call(t, s, http.MethodPost, "/api/pods", apiv1.SubmitRequest{Cluster: "wharf", Image: "busybox", Command: devstack.EchoCommand(7777)}).
		want(t, "A submits", http.StatusCreated)
	var pod apiv1.WorkPod
	if err := json.Unmarshal(ans.body, &pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancelPodQuietly(s, pod.ID) })
	waitRunningAs(t, s, a, pod.ID)
	waitEchoingAs(t, s, pod.ID, bearer("pf-a"))

	if _, code, msg := wsDial(t, s, pod.ID, 7777, bearer("pf-b")); code != http.StatusForbidden ||
		!containsAll(msg, "create-any workpods/portforward", "pf-b") {
		t.Errorf("B into A's pod: %d %q, want 403 naming create-any workpods/portforward", code, msg)
	}
	admin, code, msg := wsDial(t, s, pod.ID, 7777, bearer("pf-admin"))
	if code != http.StatusSwitchingProtocols {
		t.Fatalf("the admin into A's pod: %d %q, want 101", code, msg)
	}
	admin.Close()
	sa := "system:serviceaccount:" + devstack.HubNamespace + ":"
	err = wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return controllerLogHas(t, s, "port-forward session ended", `"user":"`+sa+`pf-admin"`, `"owner":"`+sa+`pf-a"`), nil
	})
	if err != nil {
		t.Error("the admin's session log does not name both the caller and the pod's owner")
	}
	own, code, msg := wsDial(t, s, pod.ID, 7777, bearer("pf-a"))
	if code != http.StatusSwitchingProtocols {
		t.Fatalf("A into its own pod: %d %q, want 101", code, msg)
	}
	defer own.Close()
	if _, banner, err := own.ReadMessage(); err != nil || string(banner) != "echo from "+pod.ID+"\n" {
		t.Fatalf("A's banner %q, %v", banner, err)
	}

	off := strings.Replace(string(base), "run_live = true\n", "", 1)
	if off == string(base) {
		t.Fatal("the stack's profile has no run_live = true to turn off")
	}
	writeProfile(t, s, off+"\n[api]\n"+apiSection)
	if ce := readUntilClose(t, own, time.Minute); ce.Code != websocket.ClosePolicyViolation || !strings.Contains(ce.Text, "clusters[0].run_live") {
		t.Errorf("run_live turned off by a reload: close %d %q, want 1008 naming clusters[0].run_live", ce.Code, ce.Text)
	}
}

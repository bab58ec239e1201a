package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
	"crucible.dev/crucible/internal/render"
	"crucible.dev/crucible/internal/store"
)

// TestAPIAuth runs R-C12's acceptance on a stack of its own (it restarts the
// controller with other [api] settings): Kubernetes RBAC through the hub's
// TokenReview and SubjectAccessReview, the CLI with kubeconfig users, the
// every-mode protections, a hub outage, 10,000 rows, the SSO proxy mode, and
// auth "none" refusing a non-loopback listener.
func TestAPIAuth(t *testing.T) {
	t.Parallel() // a stack of its own: see doc.go
	s := ownStack(t, devstack.Options{
		Crucible: devstacktest.BuildCrucible, Spokes: []devstack.SpokeOptions{{Name: "wharf"}},
		MirrorTTL: time.Second, MirrorMaxStale: 8 * time.Second, SweepInterval: 2 * time.Second,
		OrphanGrace: orphanGrace, RetryBudget: 90 * time.Second,
	})
	baseProfile, err := os.ReadFile(s.Federation.ProfileFile)
	if err != nil {
		t.Fatal(err)
	}
	base := string(baseProfile)
	applyHub(t, s, render.HubRBAC(devstack.HubNamespace, devstack.HubServiceAccount)...)
	for _, name := range []string{"nobody", "viewer", "submitter"} {
		hubServiceAccount(t, s, name)
	}
	grant(t, s, "viewer", render.HubViewerName, saSubject("viewer"))
	grant(t, s, "submitter", render.HubSubmitterName, saSubject("submitter"))
	withAPISection(t, s, base, "auth = \"kubernetes\"\ntoken_accept_ttl = \"1s\"\ntoken_negative_ttl = \"1s\"\naccess_allow_ttl = \"2s\"\naccess_deny_ttl = \"2s\"\n")

	token := func(sa string) string { return hubToken(t, s, sa, devstack.Issuer) }
	nobody, viewer, submitter := caller{token: token("nobody")}, caller{token: token("viewer")}, caller{token: token("submitter")}
	busybox := apiv1.SubmitRequest{Image: "busybox", Command: []string{"true"}}
	rows := func() int {
		var out []apiv1.WorkPod
		a := viewer.call(t, s, http.MethodGet, "/api/pods?limit=10000", nil).want(t, "count rows", 200)
		if err := json.Unmarshal(a.body, &out); err != nil {
			t.Fatal(err)
		}
		return len(out)
	}

	var id string
	t.Run("kubernetes RBAC", func(t *testing.T) {
		caller{}.call(t, s, http.MethodGet, "/api/pods", nil).want(t, "no token", 401)
		nobody.call(t, s, http.MethodGet, "/api/pods", nil).want(t, "no RBAC: list", 403)
		nobody.call(t, s, http.MethodPost, "/api/pods", busybox).want(t, "no RBAC: submit", 403)
		if n := rows(); n != 0 {
			t.Fatalf("%d rows after refused submits", n)
		}
		var wp apiv1.WorkPod
		a := submitter.call(t, s, http.MethodPost, "/api/pods", busybox).want(t, "submitter submits", 201)
		if err := json.Unmarshal(a.body, &wp); err != nil || wp.Submitter != "system:serviceaccount:crucible:submitter" {
			t.Fatalf("submitted %+v (%v), want the submitter recorded", wp, err)
		}
		id = wp.ID
		viewer.call(t, s, http.MethodPost, "/api/pods", busybox).want(t, "viewer submits", 403)
		viewer.call(t, s, http.MethodPost, "/api/pods/"+id+"/cancel", nil).want(t, "viewer cancels", 403)
		submitter.call(t, s, http.MethodPost, "/api/pods/"+id+"/cancel", nil).want(t, "submitter cancels", 403)
		viewer.call(t, s, http.MethodGet, "/api/pods", nil).want(t, "viewer lists", 200)
		viewer.waitFinished(t, s, id)
		viewer.call(t, s, http.MethodGet, "/api/pods/"+id+"/artifacts", nil).want(t, "viewer lists artifacts", 200)
		viewer.waitCode(t, s, "viewer reads the log", "/api/pods/"+id+"/artifacts/log", 200, time.Minute)
		dl := viewer.call(t, s, http.MethodGet, "/api/pods/"+id+"/artifacts/log", nil)
		for k, v := range map[string]string{"Content-Disposition": "attachment", "Content-Security-Policy": "sandbox", "X-Content-Type-Options": "nosniff"} {
			if dl.header.Get(k) != v {
				t.Errorf("download %s = %q, want %q", k, dl.header.Get(k), v)
			}
		}
		nobody.call(t, s, http.MethodGet, "/api/pods/"+id+"/artifacts/log", nil).want(t, "no RBAC: log", 403)
	})

	t.Run("forged and expired tokens", func(t *testing.T) {
		sa, err := s.Hub.Client.CoreV1().ServiceAccounts(devstack.HubNamespace).Get(t.Context(), "viewer", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		claims := func(exp time.Time) map[string]any {
			c := hubClaims("system:serviceaccount:crucible:viewer", devstack.Issuer)
			c["iat"], c["nbf"], c["exp"] = exp.Add(-time.Hour).Unix(), exp.Add(-time.Hour).Unix(), exp.Unix()
			c["kubernetes.io"] = map[string]any{"namespace": "crucible", "serviceaccount": map[string]any{"name": "viewer", "uid": string(sa.UID)}}
			return c
		}
		key := s.Hub.ServiceAccountKey.Key
		// The same claims signed with the hub's key pass while valid: what
		// refuses the others is the signature or the expiry.
		valid := caller{token: forged{claims: claims(time.Now().Add(time.Hour))}.signRS256(t, key)}
		valid.call(t, s, http.MethodGet, "/api/pods", nil).want(t, "hub-signed, valid", 200)
		caller{token: forged{claims: claims(time.Now().Add(-time.Minute))}.signRS256(t, key)}.
			call(t, s, http.MethodGet, "/api/pods", nil).want(t, "hub-signed, expired", 401)
		caller{token: forged{claims: claims(time.Now().Add(time.Hour))}.signRS256(t, mustKey(t))}.
			call(t, s, http.MethodGet, "/api/pods", nil).want(t, "forged signature", 401)
		caller{token: "not-a-token"}.call(t, s, http.MethodGet, "/api/pods", nil).want(t, "garbage", 401)
	})

	t.Run("CLI with kubeconfig users", func(t *testing.T) {
		bin := devstacktest.CrucibleBinary(t)
		run := func(kubeconfig string, args ...string) (string, error) {
			cmd := exec.CommandContext(t.Context(), bin, args...)
			cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "CRUCIBLE_API="+s.Federation.ControllerInternalURL)
			out, err := cmd.CombinedOutput()
			return string(out), err
		}
		viewerCfg := userKubeconfig(t, s, "    token: "+viewer.token)
		plugin := filepath.Join(t.TempDir(), "plugin.sh")
		cred := fmt.Sprintf(`{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":%q}}`, submitter.token)
		if err := os.WriteFile(plugin, []byte("#!/bin/sh\nprintf '%s' '"+cred+"'\n"), 0o700); err != nil {
			t.Fatal(err)
		}
		submitterCfg := userKubeconfig(t, s, "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: "+plugin+"\n      interactiveMode: Never")

		if out, err := run("", "pods", "list"); err == nil || !strings.Contains(out, "HTTP 401") {
			t.Errorf("CLI without credentials: %v %s, want HTTP 401", err, out)
		}
		out, err := run(submitterCfg, "submit", "--image", "busybox", "--", "true")
		if err != nil {
			t.Fatalf("CLI submit with an exec-plugin user: %v %s", err, out)
		}
		cliID := strings.TrimSpace(out)
		if out, err := run(viewerCfg, "pods", "get", cliID); err != nil || !containsAll(out, cliID, "system:serviceaccount:crucible:submitter") {
			t.Errorf("CLI pods get with a token user: %v %s", err, out)
		}
		if out, err := run(viewerCfg, "pods", "list"); err != nil || !strings.Contains(out, id) {
			t.Errorf("CLI pods list with a token user: %v %s", err, out)
		}
		if out, err := run(viewerCfg, "pods", "cancel", cliID); err == nil || !strings.Contains(out, "HTTP 403") {
			t.Errorf("CLI cancel as viewer: %v %s, want HTTP 403", err, out)
		}
		if out, err := run(viewerCfg, "submit", "--image", "busybox"); err == nil || !strings.Contains(out, "HTTP 403") {
			t.Errorf("CLI submit as viewer: %v %s, want HTTP 403", err, out)
		}
	})

	t.Run("cached answers expire", func(t *testing.T) {
		nobody.call(t, s, http.MethodGet, "/api/pods", nil).want(t, "before the grant", 403)
		grant(t, s, "nobody-views", render.HubViewerName, saSubject("nobody"))
		nobody.waitCode(t, s, "after the grant (deny TTL 2s)", "/api/pods", 200, 30*time.Second)
		if err := s.Hub.Client.RbacV1().RoleBindings(devstack.HubNamespace).Delete(t.Context(), "nobody-views", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		nobody.waitCode(t, s, "after the revocation (allow TTL 2s)", "/api/pods", 403, 30*time.Second)
	})

	t.Run("every-mode protections", func(t *testing.T) {
		before := rows()
		for _, tc := range []struct {
			name   string
			header map[string]string
			code   int
		}{
			{"no Content-Type", map[string]string{"Content-Type": ""}, 415},
			{"form Content-Type", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 415},
			{"cross-site", map[string]string{"Sec-Fetch-Site": "cross-site"}, 403},
			{"no client header", map[string]string{apiv1.ClientHeader: ""}, 403},
			{"foreign Host", map[string]string{"Host": "evil.example"}, 421},
			{"DNS rebinding", map[string]string{"Host": "rebind.attacker.example:" + strings.Split(s.Federation.ControllerInternalURL, ":")[2]}, 421},
		} {
			c := submitter
			c.header = tc.header
			c.call(t, s, http.MethodPost, "/api/pods", busybox).want(t, tc.name, tc.code)
		}
		if after := rows(); after != before {
			t.Errorf("rows %d → %d: a refused request dispatched", before, after)
		}
	})

	t.Run("hub API down", func(t *testing.T) {
		if err := s.StopAPIServer(s.Hub); err != nil {
			t.Fatal(err)
		}
		a := viewer.waitCode(t, s, "hub down", "/api/pods", 503, 30*time.Second)
		if a.header.Get("Retry-After") == "" {
			t.Error("503 without Retry-After")
		}
		// A denial cached before the outage runs out; after that the
		// answer is 503 every time, never a "no" cached from the failure.
		nobody.waitCode(t, s, "denials while down", "/api/pods", 503, 30*time.Second)
		nobody.call(t, s, http.MethodGet, "/api/pods", nil).want(t, "no cached no while down", 503)
		if err := s.StartAPIServer(t.Context(), s.Hub); err != nil {
			t.Fatal(err)
		}
		viewer.waitCode(t, s, "hub back", "/api/pods", 200, time.Minute)
		nobody.call(t, s, http.MethodGet, "/api/pods", nil).want(t, "denials again", 403)
	})

	t.Run("10000 rows answer one page", func(t *testing.T) {
		st, err := store.Open(t.Context(), "sqlite:"+filepath.Join(s.Dir, "crucible", "crucible.db"))
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		pid := s.Processes()["crucible-controller"]
		viewer.call(t, s, http.MethodGet, "/api/pods", nil).want(t, "warm up", 200)
		rssBefore := rssMiB(t, pid)
		spec := []byte(`{"image":"busybox","files":{"big":"` + strings.Repeat("x", 4096) + `"}}`)
		for i := range 10000 {
			_, err := st.CreateWorkPod(t.Context(), store.WorkPod{ID: fmt.Sprintf("bulk-%05d", i), Cluster: "wharf", Namespace: devstack.SpokeNamespace,
				Kind: "turn", State: store.StateSucceeded, Spec: spec, Submitter: "bulk"})
			if err != nil {
				t.Fatal(err)
			}
		}
		seen := map[string]bool{}
		path := "/api/pods"
		for page := range 2 {
			a := viewer.call(t, s, http.MethodGet, path, nil).want(t, "page", 200)
			var out []apiv1.WorkPod
			if err := json.Unmarshal(a.body, &out); err != nil {
				t.Fatal(err)
			}
			next := a.header.Get(apiv1.ContinueHeader)
			if len(out) != 500 || next == "" {
				t.Fatalf("page %d: %d rows, continue %q; want 500 and a token", page, len(out), next)
			}
			for _, p := range out {
				if seen[p.ID] {
					t.Fatalf("page %d repeats %s", page, p.ID)
				}
				seen[p.ID] = true
			}
			path = "/api/pods?continue=" + next
		}
		// Walk all 10,000 rows twice: pages never hold specs, so the
		// controller's memory does not follow the row count (each spec here
		// is 4 KiB: loading them all would be 40 MiB and more).
		for range 2 {
			for path := "/api/pods?limit=1000"; path != ""; {
				a := viewer.call(t, s, http.MethodGet, path, nil).want(t, "walk", 200)
				path = ""
				if next := a.header.Get(apiv1.ContinueHeader); next != "" {
					path = "/api/pods?limit=1000&continue=" + next
				}
			}
		}
		rssAfter := rssMiB(t, pid)
		t.Logf("controller RSS %.1f MiB before 10,000 rows, %.1f MiB after listing them all twice", rssBefore, rssAfter)
		if rssAfter-rssBefore > 30 {
			t.Errorf("controller RSS grew %.1f MiB listing 10,000 rows in pages", rssAfter-rssBefore)
		}
	})

	t.Run("proxy", func(t *testing.T) {
		withAPISection(t, s, base, "auth = \"proxy\"\nproxy_cidrs = [\"127.0.0.2/32\"]\naccess_allow_ttl = \"1s\"\naccess_deny_ttl = \"1s\"\n")
		grant(t, s, "alice", render.HubViewerName, rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice@example.com"})
		grant(t, s, "sre", render.HubSubmitterName, rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "sre"})
		alice := caller{local: "127.0.0.2", header: map[string]string{"X-Auth-Request-User": "alice@example.com"}}
		alice.call(t, s, http.MethodGet, "/api/pods", nil).want(t, "alice through the proxy", 200)
		alice.call(t, s, http.MethodPost, "/api/pods", busybox).want(t, "alice submits", 403)
		bob := caller{local: "127.0.0.2", header: map[string]string{"X-Auth-Request-User": "bob@example.com", "X-Auth-Request-Groups": "dev, sre"}}
		var wp apiv1.WorkPod
		if err := json.Unmarshal(bob.call(t, s, http.MethodPost, "/api/pods", busybox).want(t, "bob (group sre) submits", 201).body, &wp); err != nil || wp.Submitter != "bob@example.com" {
			t.Errorf("bob's pod: %+v %v", wp, err)
		}
		// A class with groups admits only its members, whatever else they may do.
		grant(t, s, "ops", render.HubSubmitterName, rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "ops"})
		dana := caller{local: "127.0.0.2", header: map[string]string{"X-Auth-Request-User": "dana@example.com", "X-Auth-Request-Groups": "ops"}}
		sreOnly := apiv1.SubmitRequest{Image: "busybox", Command: []string{"true"}, Class: "team-sre"}
		if a := dana.call(t, s, http.MethodPost, "/api/pods", sreOnly).want(t, "dana (ops, may submit) with class team-sre", 403); !strings.Contains(string(a.body), `class \"team-sre\" is only for members of sre`) {
			t.Errorf("the 403 does not name the class's groups: %s", a.body)
		}
		dana.call(t, s, http.MethodPost, "/api/pods", busybox).want(t, "dana without a class", 201)
		bob.call(t, s, http.MethodPost, "/api/pods", sreOnly).want(t, "bob (group sre) with class team-sre", 201)
		forgedAlice := caller{local: "127.0.0.1", header: alice.header}
		forgedAlice.call(t, s, http.MethodGet, "/api/pods", nil).want(t, "alice's headers from elsewhere", 401)
		caller{local: "127.0.0.2", header: map[string]string{"X-Auth-Request-User": "mallory@example.com"}}.
			call(t, s, http.MethodGet, "/api/pods", nil).want(t, "a user without RBAC", 403)
		caller{local: "127.0.0.2", header: map[string]string{"X-Auth-Request-User": "eve", "X-Auth-Request-Groups": "system:masters"}}.
			call(t, s, http.MethodGet, "/api/pods", nil).want(t, "system:masters through the proxy", 401)
	})

	t.Run("none refuses a non-loopback listener", func(t *testing.T) {
		profile := strings.Replace(base, "internal_listen = \"127.0.0.1:", "internal_listen = \"0.0.0.0:", 1)
		serving := filepath.Join(s.Dir, "pki", "serving")
		profile = strings.Replace(profile, "[controller]\n", fmt.Sprintf("[controller]\ninternal_tls_cert = %q\ninternal_tls_key = %q\n", serving+".crt", serving+".key"), 1)
		path := filepath.Join(t.TempDir(), "crucible.toml")
		if err := os.WriteFile(path, []byte(profile), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.CommandContext(t.Context(), devstacktest.CrucibleBinary(t), "controller", "--config", path)
		out, err := cmd.CombinedOutput()
		if err == nil || !containsAll(string(out), `api.auth "none"`, `controller.internal_listen is a loopback address, not "0.0.0.0:`) {
			t.Errorf("controller with auth none on 0.0.0.0: %v\n%s", err, out)
		}
	})
}

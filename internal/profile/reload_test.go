package profile

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// RestartNeeded names, by TOML path, each key a reload cannot apply, at its
// deepest level, and none of the keys it applies.
func TestRestartNeeded(t *testing.T) {
	base := func(t *testing.T, extra string) *Profile {
		t.Helper()
		p, err := Parse([]byte(minimalTOML + extra))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	old := base(t, "")
	for _, tc := range []struct {
		name, extra string
		want        []string
	}{
		{"the same", "", nil},
		{"a spoke added, classes and the default changed", `
[[clusters]]
name = "dock"
server = "https://dock.example.com:6443"
ca_file = "/ca"
token_source = "request"
loop_namespace = "loops"
turn_service_account = "crucible-turn"
ingest_url = "https://crucible.example.com"
ingest_audience = "crucible-ingest"

[[pods.classes]]
name = "standard"
default_for = ["loop", "turn"]
requests = { cpu = "1", memory = "1Gi" }
[[pods.classes]]
name = "gpu"
gpus = 1
requests = { cpu = "1", memory = "1Gi" }
`, nil},
		{"the store and API auth", `
[api]
auth = "kubernetes"
`, []string{"api.auth"}},
		{"listeners, a nested limit and a duration", `
[reconcile]
drain_timeout = "1m"
[ingest]
max_body_bytes = 1024
[live]
poll_interval = "3s"
`, []string{"reconcile.drain_timeout", "ingest.max_body_bytes", "live.poll_interval"}},
		{"pods outside the classes", `
[pods]
image_pull_policy = "Always"
`, []string{"pods.image_pull_policy"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next := base(t, tc.extra)
			if diff := cmp.Diff(tc.want, RestartNeeded(old, next)); diff != "" {
				t.Errorf("RestartNeeded (-want +got):\n%s", diff)
			}
		})
	}
	moved := base(t, "")
	moved.Controller.Store, moved.Controller.InternalListen = "sqlite:/elsewhere.db", "127.0.0.1:1"
	moved.DefaultCluster = "dock"
	if diff := cmp.Diff([]string{"controller.internal_listen", "controller.store"}, RestartNeeded(old, moved)); diff != "" {
		t.Errorf("RestartNeeded, controller keys (-want +got):\n%s", diff)
	}
}

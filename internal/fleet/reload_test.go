package fleet

import (
	"path/filepath"
	"strings"
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

// Update builds new clients first and changes nothing when one cannot be
// built; it keeps an unchanged client, replaces a changed one, keeps a
// removed one draining until Forget, and gives one listed again a new
// client.
func TestClientsUpdate(t *testing.T) {
	s := newFakeSpoke(t)
	wharf, dock, pier := entryFor(t, "wharf", s, "w"), entryFor(t, "dock", s, "d"), entryFor(t, "pier", s, "p")
	cs := newClientsT(t, wharf, dock)
	w0, _ := cs.Get("wharf")
	d0, _ := cs.Get("dock")
	names := func() []string {
		var out []string
		for _, c := range cs.All() {
			out = append(out, c.Entry.Name)
		}
		return out
	}

	// A new entry whose token file is missing fails the update whole.
	broken := pier
	broken.TokenFile = filepath.Join(t.TempDir(), "absent")
	_, err := cs.Update([]ClusterEntry{wharf, broken})
	if err == nil || !strings.Contains(err.Error(), "cluster pier: ") || !strings.Contains(err.Error(), broken.TokenFile) {
		t.Fatalf("Update with pier's token file missing: %v, want a missing file naming pier", err)
	}
	if diff := cmp.Diff([]string{"wharf", "dock"}, names()); diff != "" || cs.Draining("dock") {
		t.Fatalf("after a refused update (-want +got):\n%s draining dock %v", diff, cs.Draining("dock"))
	}

	// pier added, dock removed, wharf's QPS changed.
	wharf2 := wharf
	wharf2.QPS = 7
	ch, err := cs.Update([]ClusterEntry{pier, wharf2})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Changes{Added: []string{"pier"}, Changed: []string{"wharf"}, Removed: []string{"dock"}}, ch); diff != "" {
		t.Errorf("Changes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"pier", "wharf", "dock"}, names()); diff != "" {
		t.Errorf("All after the update (-want +got):\n%s", diff)
	}
	if w, _ := cs.Get("wharf"); w == w0 || w.Config.QPS != 7 {
		t.Errorf("wharf keeps its old client (QPS %v)", w.Config.QPS)
	}
	if d, ok := cs.Get("dock"); !ok || d != d0 || !cs.Draining("dock") || cs.Draining("wharf") {
		t.Errorf("dock: kept %v, same client %v, draining %v; wharf draining %v", ok, d == d0, cs.Draining("dock"), cs.Draining("wharf"))
	}

	// The same entries again: nothing changes, and dock stays draining.
	p1, _ := cs.Get("pier")
	if ch, err := cs.Update([]ClusterEntry{pier, wharf2}); err != nil || !ch.Empty() {
		t.Errorf("the same entries: %+v, %v; want no change", ch, err)
	}
	if p, _ := cs.Get("pier"); p != p1 || !cs.Draining("dock") {
		t.Errorf("an unchanged update replaced pier's client (%v) or ended dock's drain (%v)", p != p1, !cs.Draining("dock"))
	}

	// dock listed again while draining: a new client, not draining.
	ch, err = cs.Update([]ClusterEntry{pier, wharf2, dock})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Changes{Returned: []string{"dock"}}, ch); diff != "" {
		t.Errorf("Changes, dock listed again (-want +got):\n%s", diff)
	}
	if d, _ := cs.Get("dock"); d == d0 || cs.Draining("dock") {
		t.Errorf("dock listed again: same client %v, draining %v", d == d0, cs.Draining("dock"))
	}
	cs.Forget("dock") // not draining: kept
	if _, ok := cs.Get("dock"); !ok {
		t.Error("Forget dropped a listed cluster")
	}

	// Removed and forgotten.
	if _, err := cs.Update([]ClusterEntry{wharf2}); err != nil {
		t.Fatal(err)
	}
	cs.Forget("pier")
	if diff := cmp.Diff([]string{"wharf", "dock"}, names()); diff != "" {
		t.Errorf("after Forget(pier) (-want +got):\n%s", diff)
	}
	if _, ok := cs.Get("pier"); ok || cs.Draining("pier") || !cs.Draining("dock") {
		t.Errorf("pier still known (%v, draining %v) or dock not draining", ok, cs.Draining("pier"))
	}
	if _, err := cs.Update([]ClusterEntry{wharf2, wharf2}); err == nil || !strings.Contains(err.Error(), "cluster wharf: defined twice") {
		t.Errorf("Update with wharf twice: %v", err)
	}
}

package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/fleet"
	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/store"
)

// TestClustersLiveCounts: GET /api/clusters carries each cluster's live
// pods by state, zero for a cluster without any, and leaves the counts
// out, not the clusters, when the store cannot count.
func TestClustersLiveCounts(t *testing.T) {
	f := newFixture(t)
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("not-a-real-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	clients, err := fleet.NewClients([]profile.ClusterEntry{
		{Name: "wharf", Server: "https://wharf.invalid", LoopNamespace: "loops", TokenFile: token},
		{Name: "dock", Server: "https://dock.invalid", LoopNamespace: "loops", TokenFile: token},
	})
	if err != nil {
		t.Fatal(err)
	}
	f.srv.Clients = clients
	for id, st := range map[string]store.State{"a": store.StateRunning, "b": store.StateRunning, "c": store.StatePending, "d": store.StateSucceeded} {
		if _, err := f.st.CreateWorkPod(t.Context(), store.WorkPod{ID: id, Cluster: "wharf", Namespace: "loops", Kind: "turn", State: st, Spec: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	get := func() []apiv1.Cluster {
		rec := f.do(t, req{path: "/api/clusters", token: "tok-admin"})
		var out []apiv1.Cluster
		if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &out) != nil {
			t.Fatalf("GET /api/clusters = %d %s", rec.Code, rec.Body)
		}
		return out
	}
	live := map[string]*apiv1.LiveCounts{}
	for _, c := range get() {
		live[c.Name] = c.Live
	}
	want := map[string]*apiv1.LiveCounts{"wharf": {Pending: 1, Running: 2}, "dock": {}}
	if diff := cmp.Diff(want, live); diff != "" {
		t.Errorf("live counts (-want +got):\n%s", diff)
	}

	f.st.Fail(errors.New("database is down"), "CountLive")
	got := get()
	if len(got) != 2 || got[0].Live != nil || got[1].Live != nil {
		t.Errorf("clusters with the store down = %+v, want both, without counts", got)
	}
}

package api

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/capacity"
)

// fakeHistory answers set series per cluster; a cluster absent has no view.
type fakeHistory map[string][]capacity.Series

func (f fakeHistory) History(cluster string) ([]capacity.Series, bool) {
	s, ok := f[cluster]
	return s, ok
}

// GET /api/capacity/history shows each cluster's samples in profile order
// (none and view false without a view), or with ?cluster= that cluster's
// alone; an unknown cluster is 400 naming it; an unknown parameter is
// ignored, as every GET of the API ignores one; listing is authorized
// against the asked cluster.
func TestCapacityHistory(t *testing.T) {
	f := newFixture(t)
	at := time.Date(2026, 12, 4, 23, 0, 0, 0, time.UTC)
	f.srv.CapacityHistory = fakeHistory{"wharf": {{Product: "NVIDIA-A100", Samples: []capacity.Sample{
		{Time: at, Used: 1, Total: 4}, {Time: at.Add(30 * time.Second), Used: 3, Total: 4}}}}}
	wharf := apiv1.ClusterHistory{Cluster: "wharf", View: true, GPUs: []apiv1.GPUSeries{{Product: "NVIDIA-A100", Samples: []apiv1.GPUSample{
		{Time: at, Used: 1, Total: 4}, {Time: at.Add(30 * time.Second), Used: 3, Total: 4}}}}}
	tests := []struct {
		name, path, token string
		code              int
		want              []apiv1.ClusterHistory
		wantErr           map[string]string
	}{
		{name: "all", path: "/api/capacity/history", token: "tok-admin", code: 200, want: []apiv1.ClusterHistory{wharf, {Cluster: "dock"}}},
		{name: "one", path: "/api/capacity/history?cluster=dock", token: "tok-admin", code: 200, want: []apiv1.ClusterHistory{{Cluster: "dock"}}},
		{name: "unknown parameter", path: "/api/capacity/history?clustr=dock", token: "tok-admin", code: 200, want: []apiv1.ClusterHistory{wharf, {Cluster: "dock"}}},
		{name: "unknown cluster", path: "/api/capacity/history?cluster=pier", token: "tok-admin", code: 400,
			wantErr: map[string]string{"error": `cluster "pier": no such cluster`, "field": "cluster"}},
		{name: "viewer of wharf", path: "/api/capacity/history?cluster=wharf", token: "tok-viewer", code: 200, want: []apiv1.ClusterHistory{wharf}},
		{name: "viewer, every cluster", path: "/api/capacity/history", token: "tok-viewer", code: 200, want: []apiv1.ClusterHistory{wharf, {Cluster: "dock"}}},
		{name: "dock only, wharf's", path: "/api/capacity/history?cluster=wharf", token: "tok-dock", code: 403},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := f.do(t, req{path: tt.path, token: tt.token})
			if w.Code != tt.code {
				t.Fatalf("%d %s, want %d", w.Code, w.Body, tt.code)
			}
			if tt.wantErr != nil {
				var got map[string]string
				if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tt.wantErr, got); diff != "" {
					t.Errorf("error (-want +got):\n%s", diff)
				}
			}
			if tt.code != http.StatusOK {
				return
			}
			var got []apiv1.ClusterHistory
			if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("history (-want +got):\n%s", diff)
			}
		})
	}
}

package apiv1

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// GET /api/capacity/history's wire form, which the UI's Capacity page
// reads: a spoke without a view has no gpus; times are RFC 3339 UTC.
func TestClusterHistoryJSON(t *testing.T) {
	at := time.Date(2026, 12, 4, 23, 0, 30, 0, time.UTC)
	tests := []struct {
		name string
		v    ClusterHistory
		want string
	}{
		{name: "samples", v: ClusterHistory{Cluster: "wharf", View: true, GPUs: []GPUSeries{{Product: "NVIDIA-A100", Samples: []GPUSample{{Time: at, Used: 3, Total: 4}}}}},
			want: `{"cluster":"wharf","view":true,"gpus":[{"product":"NVIDIA-A100","samples":[{"time":"2026-12-04T23:00:30Z","used":3,"total":4}]}]}`},
		{name: "no view", v: ClusterHistory{Cluster: "pier"}, want: `{"cluster":"pier","view":false}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := json.Marshal(tt.v)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, string(got)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

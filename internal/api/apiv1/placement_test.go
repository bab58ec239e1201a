package apiv1

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// CheckPlacement refuses every bad cluster, clusters and placement with the
// field at fault, all problems at once, and keeps accepting what requests
// sent before placement existed.
func TestCheckPlacement(t *testing.T) {
	tests := []struct {
		name string
		req  SubmitRequest
		want string // the errors' aggregate; "" accepts
	}{
		{name: "no cluster", req: SubmitRequest{Image: "x"}},
		{name: "a pinned cluster", req: SubmitRequest{Cluster: "wharf"}},
		{name: "an unknown cluster is the server's to refuse", req: SubmitRequest{Cluster: "No_Such"}},
		{name: "auto", req: SubmitRequest{Cluster: "auto"}},
		{name: "auto, strict", req: SubmitRequest{Cluster: "auto", Placement: "strict"}},
		{name: "default cluster, strict", req: SubmitRequest{Placement: "strict"}},
		{name: "a preference list, strict", req: SubmitRequest{Clusters: []string{"wharf", "dock"}, Placement: "strict"}},
		{name: "a list of one", req: SubmitRequest{Clusters: []string{"dock"}}},
		{name: "an empty list is no list", req: SubmitRequest{Clusters: []string{}}},
		{name: "cluster and clusters", req: SubmitRequest{Cluster: "wharf", Clusters: []string{"dock"}},
			want: `clusters: Forbidden: cluster and clusters are exclusive: name one cluster, "auto", or a preference list`},
		{name: "auto and clusters", req: SubmitRequest{Cluster: "auto", Clusters: []string{"dock"}},
			want: `clusters: Forbidden: cluster and clusters are exclusive: name one cluster, "auto", or a preference list`},
		{name: "an empty entry", req: SubmitRequest{Clusters: []string{"wharf", ""}}, want: "clusters[1]: Required value: a cluster's name"},
		{name: "not a DNS label", req: SubmitRequest{Clusters: []string{"Wharf", "dock.example"}},
			want: `[clusters[0]: Invalid value: "Wharf": must be a cluster's name (a DNS label), ` +
				`clusters[1]: Invalid value: "dock.example": must be a cluster's name (a DNS label)]`},
		{name: "auto in a list", req: SubmitRequest{Clusters: []string{"wharf", "auto"}},
			want: `clusters[1]: Invalid value: "auto": "auto" is not a cluster: set cluster "auto" instead of a list`},
		{name: "a repeated entry", req: SubmitRequest{Clusters: []string{"wharf", "dock", "wharf"}}, want: `clusters[2]: Duplicate value: "wharf"`},
		{name: "too many", req: SubmitRequest{Clusters: clusterNames(MaxClusters + 1)},
			want: "clusters: Too many: 101: must have at most 100 items"},
		{name: "as many as allowed", req: SubmitRequest{Clusters: clusterNames(MaxClusters)}},
		{name: "an unknown placement", req: SubmitRequest{Cluster: "auto", Placement: "Strict"},
			want: `placement: Unsupported value: "Strict": supported values: "strict"`},
		{name: "strict for a pinned pod", req: SubmitRequest{Cluster: "wharf", Placement: "strict"},
			want: `placement: Invalid value: "strict": strict means nothing for a pod pinned to cluster wharf: use cluster "auto" or clusters`},
		{name: "every problem at once", req: SubmitRequest{Cluster: "wharf", Clusters: []string{"", "dock", "dock"}, Placement: "best"},
			want: `[clusters: Forbidden: cluster and clusters are exclusive: name one cluster, "auto", or a preference list, ` +
				`clusters[0]: Required value: a cluster's name, clusters[2]: Duplicate value: "dock", ` +
				`placement: Unsupported value: "best": supported values: "strict"]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ""
			if errs := CheckPlacement(tt.req); len(errs) > 0 {
				got = errs.ToAggregate().Error()
			}
			if got != tt.want {
				t.Errorf("CheckPlacement = %q\nwant            %q", got, tt.want)
			}
		})
	}
}

func clusterNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("spoke-%d", i)
	}
	return names
}

// FuzzCheckPlacement: CheckPlacement never panics, accepts only what the
// rules allow, and names a field of the three in every problem.
func FuzzCheckPlacement(f *testing.F) {
	f.Add("auto", "wharf,dock", "strict")
	f.Add("", "wharf,,WHARF,auto,wharf", "")
	f.Add("wharf", "", "strict")
	f.Add("", strings.Repeat("a,", 101), "x")
	f.Fuzz(func(t *testing.T, cluster, list, placement string) {
		req := SubmitRequest{Cluster: cluster, Placement: placement}
		if list != "" {
			req.Clusters = strings.Split(list, ",")
		}
		errs := CheckPlacement(req)
		for _, e := range errs {
			if e.Field != "clusters" && e.Field != "placement" && !strings.HasPrefix(e.Field, "clusters[") {
				t.Fatalf("%+v: problem names field %q", req, e.Field)
			}
		}
		if len(errs) > 0 {
			return
		}
		switch {
		case cluster != "" && len(req.Clusters) > 0:
			t.Fatalf("%+v: accepted cluster and clusters", req)
		case placement != "" && placement != PlacementStrict:
			t.Fatalf("%+v: accepted placement %q", req, placement)
		case placement == PlacementStrict && cluster != "" && cluster != ClusterAuto:
			t.Fatalf("%+v: accepted strict for a pinned pod", req)
		case len(req.Clusters) > MaxClusters:
			t.Fatalf("%+v: accepted %d clusters", req, len(req.Clusters))
		}
		for i, name := range req.Clusters {
			if name == "" || name == ClusterAuto || slices.Contains(req.Clusters[:i], name) || len(name) > 63 {
				t.Fatalf("%+v: accepted entry %d %q", req, i, name)
			}
		}
	})
}

// The wire names of placement, as the CLI and the UI read them.
func TestPlacementJSON(t *testing.T) {
	at := time.Date(2026, 12, 4, 20, 0, 0, 0, time.UTC)
	fits := false
	tests := []struct {
		name string
		v    any
		want string
	}{
		{name: "submit", v: SubmitRequest{Image: "x", Clusters: []string{"wharf", "dock"}, Placement: "strict"},
			want: `{"clusters":["wharf","dock"],"placement":"strict","image":"x"}`},
		{name: "placement", v: Placement{Decision: "wharf: fits (4 nvidia.com/gpu free); pier: unreachable", Chosen: "wharf", Waits: true,
			Moves: []Move{{From: "dock", To: "wharf", Reason: "exceeded quota", At: at}}},
			want: `{"decision":"wharf: fits (4 nvidia.com/gpu free); pier: unreachable","chosen":"wharf","waits":true,` +
				`"moves":[{"from":"dock","to":"wharf","reason":"exceeded quota","at":"2026-12-04T20:00:00Z"}]}`},
		{name: "capacity", v: ClusterCapacity{Cluster: "wharf", View: true, Synced: true,
			GPUs: []GPUProduct{{Product: "NVIDIA-H100-80GB-HBM3", Free: 1, Total: 4}}, CPU: &Amount{Free: "3500m", Total: "8"},
			Memory: &Amount{Free: "20Gi", Total: "64Gi"}, Fits: &fits, Reason: "1 of 4 nvidia.com/gpu free (needs 2)"},
			want: `{"cluster":"wharf","view":true,"synced":true,"gpus":[{"product":"NVIDIA-H100-80GB-HBM3","free":1,"total":4}],` +
				`"cpu":{"free":"3500m","total":"8"},"memory":{"free":"20Gi","total":"64Gi"},"fits":false,` +
				`"reason":"1 of 4 nvidia.com/gpu free (needs 2)"}`},
		{name: "capacity without a view", v: ClusterCapacity{Cluster: "pier"}, want: `{"cluster":"pier","view":false,"synced":false}`},
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

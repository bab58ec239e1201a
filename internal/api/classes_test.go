package api

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/profile"
)

// GET /api/classes lists, per cluster the caller may create on, the classes
// that cluster offers and whose groups admit the caller, with their bounds.
func TestClasses(t *testing.T) {
	f := newFixture(t)
	p := f.srv.Profile.Load()
	p.Clusters[1].Classes = map[string]profile.ClassAdjust{"gpu": {Withhold: true}}
	p.Pods.Classes = append(p.Pods.Classes, profile.PodClass{
		Name: "gpu", GPUs: 1, GPUResource: "nvidia.com/gpu", Groups: []string{"ml"},
		Requests: map[string]profile.Quantity{"cpu": {Quantity: resource.MustParse("2")}, "memory": {Quantity: resource.MustParse("8Gi")}},
		Shm:      profile.Quantity{Quantity: resource.MustParse("1Gi")},
		Deadline: profile.Duration{Duration: time.Hour}, MaxDeadline: profile.Duration{Duration: 24 * time.Hour},
		Allow: profile.ClassAllow{GPUs: profile.IntRange{Min: 1, Max: 8},
			Resources: map[string]profile.QuantityRange{"memory": {Max: profile.Quantity{Quantity: resource.MustParse("64Gi")}}}},
	})
	f.srv.Authn = fakeAuthn{"tok-ml": "bo|ml,research", "tok-submitter": "submitter", "tok-viewer": "viewer", "tok-flaky": "flaky"}
	f.authz.allowed["bo create wharf"], f.authz.allowed["bo create dock"] = true, true

	standard := apiv1.Class{Name: "standard", DefaultFor: []string{"loop", "turn"}, Requests: map[string]string{"cpu": "500m", "memory": "1Gi"},
		Limits: map[string]string{"memory": "1Gi"}, GPUResource: "nvidia.com/gpu", Deadline: "6h0m0s", MaxDeadline: "48h0m0s"}
	gpu := apiv1.Class{Name: "gpu", Requests: map[string]string{"cpu": "2", "memory": "8Gi"}, GPUs: 1, GPUResource: "nvidia.com/gpu",
		Deadline: "1h0m0s", MaxDeadline: "24h0m0s", Shm: "1Gi",
		Allow: apiv1.Allow{GPUs: &apiv1.Range{Min: "1", Max: "8"}, Resources: map[string]apiv1.Range{"memory": {Max: "64Gi"}}}}
	for _, tc := range []struct {
		token string
		want  []apiv1.ClusterClasses
	}{
		{"tok-ml", []apiv1.ClusterClasses{{Cluster: "wharf", Classes: []apiv1.Class{standard, gpu}}, {Cluster: "dock", Classes: []apiv1.Class{standard}}}},
		{"tok-submitter", []apiv1.ClusterClasses{{Cluster: "wharf", Classes: []apiv1.Class{standard}}, {Cluster: "dock", Classes: []apiv1.Class{standard}}}},
		{"tok-viewer", []apiv1.ClusterClasses{}}, // may create nowhere
	} {
		rec := f.do(t, req{path: "/api/classes", token: tc.token})
		if rec.Code != http.StatusOK {
			t.Fatalf("%s: %d %s", tc.token, rec.Code, rec.Body)
		}
		var got []apiv1.ClusterClasses
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.token, diff)
		}
	}
	if rec := f.do(t, req{path: "/api/classes", token: "tok-flaky"}); rec.Code != http.StatusServiceUnavailable {
		t.Errorf("an authorizer that cannot answer: %d, want 503 (never a shorter list)", rec.Code)
	}
	if rec := f.do(t, req{path: "/api/classes"}); rec.Code != http.StatusUnauthorized {
		t.Errorf("no token: %d, want 401", rec.Code)
	}
}

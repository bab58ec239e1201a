package profile

import (
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// validateProfile speaks apimachinery's vocabulary: each finding has the
// type a caller can branch on and the TOML key path, in file order.
func TestValidateProfileErrorTypes(t *testing.T) {
	p := wantDefaults()
	p.Controller.ExternalURL = ""
	p.Hub.CAFile = "/ca.crt"
	p.Pods.ImagePullPolicy = "always"
	p.Pods.NodeSelector = map[string]string{"bad key": "ok"}
	p.API.Auth = "basic"
	p.Clusters = append(p.Clusters, p.Clusters[0])
	p.Clusters[1].TokenFile = ""
	p.DefaultCluster = "nope"
	type finding struct {
		Type  field.ErrorType
		Field string
	}
	want := []finding{
		{field.ErrorTypeRequired, "controller.external_url"},
		{field.ErrorTypeForbidden, "hub.ca_file"},
		{field.ErrorTypeInvalid, `pods.node_selector."bad key"`},
		{field.ErrorTypeNotSupported, "pods.image_pull_policy"},
		{field.ErrorTypeNotSupported, "api.auth"},
		{field.ErrorTypeRequired, "clusters[1].token_file"},
		{field.ErrorTypeDuplicate, "clusters[1].name"},
		{field.ErrorTypeNotFound, "default_cluster"},
	}
	var got []finding
	for _, e := range validateProfile(p) {
		got = append(got, finding{e.Type, e.Field})
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestProblemText(t *testing.T) {
	path := field.NewPath("ingest").Child("rate_per_pod")
	tests := []struct {
		err  *field.Error
		want string
	}{
		{field.Required(path, ""), "ingest.rate_per_pod: required"},
		{field.Required(path, "required when x is set"), "ingest.rate_per_pod: required when x is set"},
		{field.Forbidden(path, ""), "ingest.rate_per_pod: forbidden"},
		{field.Forbidden(path, "only used with x"), "ingest.rate_per_pod: only used with x"},
		{field.Invalid(path, "a\"b\n", "bad"), `ingest.rate_per_pod "a\"b\n": bad`},
		{field.Invalid(path, -2, "must be positive"), `ingest.rate_per_pod "-2": must be positive`},
		{field.Invalid(path, int64(-3), "must be positive"), `ingest.rate_per_pod "-3": must be positive`},
		{field.Invalid(path, float32(-1.5), "must be positive"), `ingest.rate_per_pod "-1.5": must be positive`},
		{field.Invalid(path, float32(math.NaN()), "must be positive"), `ingest.rate_per_pod "NaN": must be positive`},
		{field.Invalid(path, -90*time.Second, "must be positive"), `ingest.rate_per_pod "-1m30s": must be positive`},
		{field.Invalid(path, true, "needs x"), `ingest.rate_per_pod "true": needs x`},
		{field.Duplicate(path, "w"), `ingest.rate_per_pod "w": duplicate value`},
		{withDetail(field.Duplicate(path, "w"), "duplicate of y"), `ingest.rate_per_pod "w": duplicate of y`},
		{withDetail(field.NotFound(path, "w"), "no such cluster"), `ingest.rate_per_pod "w": no such cluster`},
	}
	for _, tt := range tests {
		if got := problemText(tt.err); got != tt.want {
			t.Errorf("problemText(%v)\n got %s\nwant %s", tt.err, got, tt.want)
		}
	}
}

// setDefaults is the one place defaults come from: applied to the zero
// profile it gives every default, applied again it changes nothing, and it
// keeps what is set.
func TestSetDefaults(t *testing.T) {
	p := &Profile{Controller: Controller{ExternalURL: "https://crucible.example.com"}, Clusters: []ClusterEntry{{Name: "wharf"}}}
	setDefaults(p)
	want := wantDefaults()
	want.Clusters = []ClusterEntry{{Name: "wharf", TokenSource: "file", QPS: DefaultQPS, Burst: DefaultBurst, RunLivePort: 7777, RunLivePorts: []int{7777}}}
	if diff := cmp.Diff(want, p); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
	again := *p
	setDefaults(&again)
	if diff := cmp.Diff(p, &again); diff != "" {
		t.Errorf("applied twice (-once +twice):\n%s", diff)
	}

	// A default that follows another key follows its explicit value.
	set := &Profile{Controller: Controller{Instance: "ci"}, LeaderElection: LeaderElection{LeaseNamespace: "kube-system"},
		Clusters: []ClusterEntry{{Name: "a", QPS: 1.5}, {Name: "b", Burst: 3}}}
	setDefaults(set)
	if got, want := set.LeaderElection, (LeaderElection{LeaseName: "ci-leader", LeaseNamespace: "kube-system", LeaseDuration: Duration{DefaultLeaseDuration},
		RenewDeadline: Duration{DefaultRenewDeadline}, RetryPeriod: Duration{DefaultRetryPeriod}}); got != want {
		t.Errorf("leader election = %+v, want %+v", got, want)
	}
	if diff := cmp.Diff([]ClusterEntry{{Name: "a", TokenSource: "file", QPS: 1.5, Burst: DefaultBurst, RunLivePort: 7777, RunLivePorts: []int{7777}},
		{Name: "b", TokenSource: "file", QPS: DefaultQPS, Burst: 3, RunLivePort: 7777, RunLivePorts: []int{7777}}}, set.Clusters); diff != "" {
		t.Errorf("clusters (-want +got):\n%s", diff)
	}
	if set.DefaultCluster != "" {
		t.Errorf("default cluster of two = %q, want none (the profile must name it)", set.DefaultCluster)
	}
}

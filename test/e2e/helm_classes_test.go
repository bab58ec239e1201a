package e2e

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"

	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/workpod"
)

// hubChartProfile renders the hub chart with args and parses its profile
// with the controller's strict loader.
func hubChartProfile(t *testing.T, args ...string) *profile.Profile {
	t.Helper()
	_, objs := helmTemplate(t, "crucible-hub", "crucible", args...)
	p, err := profile.Parse([]byte(configMapData(t, objs, "crucible-profile", "crucible.toml")))
	if err != nil {
		t.Fatalf("the controller refuses the chart's profile: %v", err)
	}
	return p
}

// profileCluster is the profile's cluster entry name.
func profileCluster(t *testing.T, p *profile.Profile, name string) profile.ClusterEntry {
	t.Helper()
	c, ok := p.Cluster(name)
	if !ok {
		t.Fatalf("the profile has no cluster %s", name)
	}
	return c
}

func quantity(s string) profile.Quantity { return profile.Quantity{Quantity: resource.MustParse(s)} }

// The hub chart's default pod classes are examples/crucible.toml's, except
// that gpu names no groups: out of the box anyone who may create work pods
// may ask for a GPU.
func TestHelmHubChartDefaultPodClasses(t *testing.T) {
	example, err := profile.Load(repoRoot + "/examples/crucible.toml")
	if err != nil {
		t.Fatal(err)
	}
	want := example.Pods.Classes
	if len(want) != 2 || want[1].Name != "gpu" {
		t.Fatalf("examples/crucible.toml's classes changed: %v", want)
	}
	want[1].Groups = nil

	p := hubChartProfile(t)
	if diff := cmp.Diff(want, p.Pods.Classes); diff != "" {
		t.Errorf("default classes vs examples/crucible.toml's without groups (-want +got):\n%s", diff)
	}
	wharf := profileCluster(t, p, "wharf")
	for _, tc := range []struct{ name, kind, want string }{
		{"", workpod.KindLoop, "standard"},
		{"", workpod.KindTurn, "standard"},
		{"gpu", workpod.KindLoop, "gpu"},
	} {
		got, err := p.ClassFor(wharf, tc.name, tc.kind)
		if err != nil || got.Name != tc.want {
			t.Errorf("ClassFor(wharf, %q, %s) = %q, %v; want %q", tc.name, tc.kind, got.Name, err, tc.want)
		}
	}
}

// ci/pod-classes-values.yaml's classes reach the controller as configured,
// every key of a class included, and each spoke offers them with its own
// adjustments: wharf's GPUs are AMD's, dock withholds gpu and drops batch's
// toleration.
func TestHelmHubChartPodClassesPerSpoke(t *testing.T) {
	p := hubChartProfile(t, chartCase{chart: "crucible-hub", values: "ci/pod-classes-values.yaml"}.args()...)
	standard := profile.PodClass{
		Name: "standard", DefaultFor: []string{"loop"},
		Requests:    map[string]profile.Quantity{"cpu": quantity("500m"), "memory": quantity("1Gi")},
		Limits:      map[string]profile.Quantity{"memory": quantity("1Gi")},
		GPUResource: "nvidia.com/gpu", Deadline: profile.Duration{Duration: 6 * time.Hour},
		MaxDeadline: profile.Duration{Duration: 48 * time.Hour}, RunAsUser: 65532, RunAsGroup: 65532,
	}
	batch := profile.PodClass{
		Name: "batch", DefaultFor: []string{"turn"}, Groups: []string{"batch-users", "ml-platform"},
		Requests:     map[string]profile.Quantity{"cpu": quantity("2"), "memory": quantity("4Gi"), "ephemeral-storage": quantity("20Gi")},
		Limits:       map[string]profile.Quantity{"memory": quantity("8Gi"), "ephemeral-storage": quantity("40Gi")},
		GPUResource:  "nvidia.com/gpu",
		Tolerations:  []profile.Toleration{{Key: "dedicated", Operator: "Equal", Value: "batch", Effect: "NoExecute", TolerationSeconds: 300}},
		NodeSelector: map[string]string{"pool": "batch"},
		NodeAffinity: []profile.NodeRequirement{
			{Key: "topology.kubernetes.io/zone", Operator: "In", Values: []string{"zone-a", "zone-b"}},
			{Key: "node.example.com/spot", Operator: "DoesNotExist"},
		},
		PriorityClass: "batch-low", RuntimeClass: "gvisor",
		Deadline: profile.Duration{Duration: 2 * time.Hour}, MaxDeadline: profile.Duration{Duration: 24 * time.Hour},
		MaxPending: profile.Duration{Duration: 30 * time.Minute}, SpillAfter: profile.Duration{Duration: 5 * time.Minute}, MaxSpills: 3, Shm: quantity("1Gi"), RunAsUser: 1000, RunAsGroup: 1000,
		Allow: profile.ClassAllow{Resources: map[string]profile.QuantityRange{"memory": {Min: quantity("1Gi"), Max: quantity("16Gi")}}},
	}
	batchOnDock := batch
	batchOnDock.Tolerations = []profile.Toleration{}
	gpuOnWharf := profile.PodClass{
		Name: "gpu", GPUs: 1, GPUResource: "amd.com/gpu",
		Requests:      map[string]profile.Quantity{"cpu": quantity("8"), "memory": quantity("32Gi")},
		Limits:        map[string]profile.Quantity{"memory": quantity("32Gi")},
		Tolerations:   []profile.Toleration{{Key: "amd.com/gpu", Operator: "Exists", Effect: "NoSchedule"}},
		NodeSelector:  map[string]string{"nvidia.com/gpu.present": "true", "amd.com/gpu.present": "true"},
		PriorityClass: "gpu-high", RuntimeClass: "rocm", Shm: quantity("8Gi"),
		Deadline: profile.Duration{Duration: 12 * time.Hour}, MaxDeadline: profile.Duration{Duration: 72 * time.Hour},
		RunAsUser: 65532, RunAsGroup: 65532, Allow: profile.ClassAllow{GPUs: profile.IntRange{Min: 1, Max: 8}},
	}
	for _, tc := range []struct {
		cluster, class, kind string
		want                 *profile.PodClass // nil: not offered there
	}{
		{"wharf", "", workpod.KindLoop, &standard},
		{"wharf", "", workpod.KindTurn, &batch},
		{"wharf", "gpu", workpod.KindTurn, &gpuOnWharf},
		{"dock", "", workpod.KindLoop, &standard},
		{"dock", "", workpod.KindTurn, &batchOnDock},
		{"dock", "gpu", workpod.KindLoop, nil},
	} {
		cluster := profileCluster(t, p, tc.cluster)
		got, err := p.ClassFor(cluster, tc.class, tc.kind)
		switch {
		case tc.want == nil && (err == nil || cluster.OffersClass(tc.class)):
			t.Errorf("%s offers %q (%v), want it withheld", tc.cluster, tc.class, err)
		case tc.want == nil:
		case err != nil:
			t.Errorf("ClassFor(%s, %q, %s): %v", tc.cluster, tc.class, tc.kind, err)
		default:
			if diff := cmp.Diff(*tc.want, got); diff != "" {
				t.Errorf("ClassFor(%s, %q, %s) (-want +got):\n%s", tc.cluster, tc.class, tc.kind, diff)
			}
		}
	}
}

// A spoke entry without qps and burst takes the profile's defaults rather
// than rendering an empty TOML value the controller would refuse.
func TestHelmHubChartSpokeRateDefaults(t *testing.T) {
	values := filepath.Join(t.TempDir(), "values.yaml")
	spoke := "spokes:\n- {name: wharf, server: \"https://wharf.example.com:6443\", caBundle: \"\", loopNamespace: loops,\n" +
		"   turnServiceAccount: crucible-turn, ingestAudience: crucible-ingest}\n"
	if err := os.WriteFile(values, []byte(spoke), 0o600); err != nil {
		t.Fatal(err)
	}
	p := hubChartProfile(t, "-f", values)
	if c := profileCluster(t, p, "wharf"); c.QPS != profile.DefaultQPS || c.Burst != profile.DefaultBurst {
		t.Errorf("qps %v burst %d, want the profile's defaults %v and %d", c.QPS, c.Burst, profile.DefaultQPS, profile.DefaultBurst)
	}
}

// The replicas compete for a Lease in the release namespace, where the chart
// grants them leases — not in the profile's default namespace crucible,
// where, installed elsewhere with two replicas, nobody could lead.
func TestHelmHubChartLeaseInTheReleaseNamespace(t *testing.T) {
	_, objs := helmTemplate(t, "crucible-hub", "platform", "--set", "replicas=2", "--set", "store.postgres.enabled=true")
	p, err := profile.Parse([]byte(configMapData(t, objs, "crucible-profile", "crucible.toml")))
	if err != nil {
		t.Fatalf("the controller refuses the chart's profile: %v", err)
	}
	role := find(t, objs, "Role", "crucible-controller-leader-election")
	if p.LeaderElection.LeaseNamespace != "platform" || role.GetNamespace() != "platform" {
		t.Errorf("lease namespace %q, leader-election Role in %q; want both the release namespace platform",
			p.LeaderElection.LeaseNamespace, role.GetNamespace())
	}
}

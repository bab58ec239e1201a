package profile

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// ClassFor answers a cluster's view of a class: the kind's default for no
// name, the cluster's adjustments applied, and an error naming what is
// missing for an unknown class or one the cluster withholds.
func TestClassFor(t *testing.T) {
	p, err := Parse([]byte(minimalTOML + `
[[pods.classes]]
name = "standard"
default_for = ["loop", "turn"]
requests = { cpu = "1", memory = "1Gi" }
[[pods.classes]]
name = "gpu"
gpus = 1
requests = { cpu = "1", memory = "1Gi" }
tolerations = [{ key = "nvidia.com/gpu", operator = "Exists", effect = "NoSchedule" }]
node_selector = { "nvidia.com/gpu.present" = "true" }

[[clusters]]
name = "dock"
server = "https://dock.example.com:6443"
ca_file = "/etc/crucible/dock/ca.crt"
token_file = "/var/run/secrets/crucible/dock/token"
loop_namespace = "loops"
turn_service_account = "crucible-turn"
ingest_url = "https://crucible.example.com"
ingest_audience = "crucible-ingest"
[clusters.classes.gpu]
withhold = true

[[clusters]]
name = "amd"
server = "https://amd.example.com:6443"
ca_file = "/etc/crucible/amd/ca.crt"
token_file = "/var/run/secrets/crucible/amd/token"
loop_namespace = "loops"
turn_service_account = "crucible-turn"
ingest_url = "https://crucible.example.com"
ingest_audience = "crucible-ingest"
[clusters.classes.gpu]
gpu_resource = "amd.com/gpu"
tolerations = [{ key = "amd.com/gpu", operator = "Exists", effect = "NoSchedule" }]
node_selector = { "amd.com/gpu.present" = "true" }
`))
	if err != nil {
		t.Fatal(err)
	}
	wharf, _ := p.Cluster("wharf")
	dock, _ := p.Cluster("dock")
	amd, _ := p.Cluster("amd")

	if c, err := p.ClassFor(wharf, "", "loop"); err != nil || c.Name != "standard" {
		t.Errorf("default loop class on wharf = %q, %v; want standard", c.Name, err)
	}
	gpu, err := p.ClassFor(wharf, "gpu", "turn")
	if err != nil || gpu.GPUResource != "nvidia.com/gpu" || gpu.Tolerations[0].Key != "nvidia.com/gpu" {
		t.Errorf("gpu on wharf = %+v, %v; want the class as written", gpu, err)
	}
	adjusted, err := p.ClassFor(amd, "gpu", "turn")
	if err != nil {
		t.Fatal(err)
	}
	want := []Toleration{{Key: "amd.com/gpu", Operator: "Exists", Effect: "NoSchedule"}}
	if adjusted.GPUResource != "amd.com/gpu" || !cmp.Equal(adjusted.Tolerations, want) {
		t.Errorf("gpu on amd: resource %q tolerations %+v; want amd.com/gpu and %+v", adjusted.GPUResource, adjusted.Tolerations, want)
	}
	if diff := cmp.Diff(map[string]string{"nvidia.com/gpu.present": "true", "amd.com/gpu.present": "true"}, adjusted.NodeSelector); diff != "" {
		t.Errorf("gpu on amd: node selector merged over the class's (-want +got):\n%s", diff)
	}
	if gpu.NodeSelector["amd.com/gpu.present"] != "" {
		t.Error("adjusting the class for amd changed the profile's class")
	}
	for _, tc := range []struct {
		cluster     ClusterEntry
		class, want string
	}{
		{dock, "gpu", `class "gpu" is not offered on cluster "dock"`},
		{wharf, "tpu", `no class "tpu" (the profile has "standard", "gpu")`},
	} {
		if _, err := p.ClassFor(tc.cluster, tc.class, "turn"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ClassFor(%s, %s) = %v; want an error with %q", tc.cluster.Name, tc.class, err, tc.want)
		}
	}
	if dock.OffersClass("gpu") || !amd.OffersClass("gpu") || !dock.OffersClass("standard") {
		t.Error("OffersClass disagrees with the entries' withhold")
	}
}

// minimalTOML is a profile with one cluster, wharf, that later [[clusters]]
// tables extend.
const minimalTOML = `
default_cluster = "wharf"
[controller]
external_url = "https://crucible.example.com"

[[clusters]]
name = "wharf"
server = "https://wharf.example.com:6443"
ca_file = "/etc/crucible/wharf/ca.crt"
token_file = "/var/run/secrets/crucible/wharf/token"
loop_namespace = "loops"
turn_service_account = "crucible-turn"
ingest_url = "https://crucible.example.com"
ingest_audience = "crucible-ingest"
`

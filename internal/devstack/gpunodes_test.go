package devstack

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"crucible.dev/crucible/internal/profile"
)

var gpuSpokes = []string{"wharf", "dock", "pier"}

func TestParseGPUNodes(t *testing.T) {
	h100 := "NVIDIA-H100-80GB-HBM3"
	got, err := ParseGPUNodes("wharf=1x4, dock=2x8:"+h100, gpuSpokes)
	if err != nil {
		t.Fatal(err)
	}
	want := []GPUPool{{"wharf", 1, 4, DefaultGPUProduct}, {"dock", 2, 8, h100}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pools (-want +got):\n%s", diff)
	}
	if s := got[0].String() + "," + got[1].String(); s != "wharf=1x4,dock=2x8:"+h100 {
		t.Errorf("String() = %q", s)
	}
}

// Every bad entry is reported, each named, and nothing is returned.
func TestParseGPUNodesErrors(t *testing.T) {
	for _, tt := range []struct {
		spec string
		want []string
	}{
		{"", []string{`--gpu-nodes entry "": want SPOKE=NODESxGPUS[:PRODUCT]`}},
		{"ferry=1x4", []string{`--gpu-nodes entry "ferry=1x4": no spoke "ferry" in this stack (it has wharf, dock, pier)`}},
		{"dock=0x8", []string{`--gpu-nodes entry "dock=0x8": 0 nodes: want 1 to 64`}},
		{"dock=65x8", []string{`--gpu-nodes entry "dock=65x8": 65 nodes: want 1 to 64`}},
		{"dock=1x0", []string{`--gpu-nodes entry "dock=1x0": 0 GPUs per node: want 1 to 16`}},
		{"dock=1x17", []string{`--gpu-nodes entry "dock=1x17": 17 GPUs per node: want 1 to 16`}},
		{"dock=ax8", []string{`--gpu-nodes entry "dock=ax8": nodes "a" is not a number`}},
		{"dock=2", []string{`--gpu-nodes entry "dock=2": want SPOKE=NODESxGPUS[:PRODUCT]`}},
		{"=1x4", []string{`--gpu-nodes entry "=1x4": want SPOKE=NODESxGPUS[:PRODUCT]`}},
		{"dock=1x8:", []string{`--gpu-nodes entry "dock=1x8:": product "" is not a label value`}},
		{"dock=1x8:NVIDIA H100", []string{`--gpu-nodes entry "dock=1x8:NVIDIA H100": product "NVIDIA H100" is not a label value`}},
		{"dock=1x8:" + strings.Repeat("a", 64), []string{`--gpu-nodes entry "dock=1x8:aaaa`}},
		{"dock=1x8,dock=2x4", []string{`--gpu-nodes entry "dock=2x4": spoke dock is named twice`}},
		{"wharf=0x4,ferry=1x1,pier=1x1,", []string{`--gpu-nodes entry "wharf=0x4": 0 nodes`, `--gpu-nodes entry "ferry=1x1": no spoke "ferry"`, `--gpu-nodes entry "": want`}},
	} {
		t.Run(tt.spec, func(t *testing.T) {
			pools, err := ParseGPUNodes(tt.spec, gpuSpokes)
			if err == nil || pools != nil {
				t.Fatalf("ParseGPUNodes(%q) = %v, %v; want an error", tt.spec, pools, err)
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tt.want) {
				t.Fatalf("errors:\n%v\nwant %d", err, len(tt.want))
			}
			for i, w := range tt.want {
				if !strings.HasPrefix(lines[i], w) {
					t.Errorf("error %d = %q, want it to start with %q", i, lines[i], w)
				}
			}
		})
	}
}

// FuzzParseGPUNodes: never a panic; an accepted spec gives pools within the
// bounds, one per spoke named, whose nodes validate and which print back to
// a spec that parses to the same pools.
func FuzzParseGPUNodes(f *testing.F) {
	for _, seed := range []string{"wharf=1x4", "wharf=1x4,dock=2x8:NVIDIA-H100-80GB-HBM3", "dock=64x16", "dock=0x8",
		"pier=1x1:a", "dock=1x8:", "=", ",", "wharf=1x4,wharf=1x4", "dock=+1x-2", "dock=1x8:x:y", "dock=01x08"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		pools, err := ParseGPUNodes(spec, gpuSpokes)
		if err != nil {
			if pools != nil {
				t.Fatalf("pools %v with error %v", pools, err)
			}
			return
		}
		var back []string
		seen := map[string]bool{}
		for _, g := range pools {
			if seen[g.Spoke] || g.Nodes < 1 || g.Nodes > MaxGPUNodes || g.GPUs < 1 || g.GPUs > MaxGPUsPerNode {
				t.Fatalf("pool %+v out of bounds or repeated", g)
			}
			seen[g.Spoke] = true
			if errs := validateNodes(g.Spoke, append([]NodeSpec{CPUNode(NodeName)}, g.NodeSpecs()...)); len(errs) > 0 {
				t.Fatalf("pool %+v gives invalid nodes: %v", g, errs)
			}
			back = append(back, g.String())
		}
		again, err := ParseGPUNodes(strings.Join(back, ","), gpuSpokes)
		if err != nil || !cmp.Equal(pools, again) {
			t.Fatalf("%q parses to %v, printed %q parses to %v, %v", spec, pools, back, again, err)
		}
	})
}

// A pool's nodes have GPUNode's shape with the pool's GPUs and product, and
// names that sort in node order however many there are.
func TestGPUPoolNodeSpecs(t *testing.T) {
	for _, tt := range []struct {
		nodes int
		names []string
	}{
		{1, []string{GPUNodeName}},
		{3, []string{"kwok-node-gpu-0", "kwok-node-gpu-1", "kwok-node-gpu-2"}},
		{12, []string{"kwok-node-gpu-00", "kwok-node-gpu-01", "kwok-node-gpu-02", "kwok-node-gpu-03", "kwok-node-gpu-04", "kwok-node-gpu-05",
			"kwok-node-gpu-06", "kwok-node-gpu-07", "kwok-node-gpu-08", "kwok-node-gpu-09", "kwok-node-gpu-10", "kwok-node-gpu-11"}},
	} {
		specs := GPUPool{Spoke: "dock", Nodes: tt.nodes, GPUs: 8, Product: "NVIDIA-H100-80GB-HBM3"}.NodeSpecs()
		if diff := cmp.Diff(tt.names, nodeNames(specs)); diff != "" {
			t.Errorf("%d nodes: names (-want +got):\n%s", tt.nodes, diff)
		}
		want := ProductGPUNode(tt.names[0], 8, "NVIDIA-H100-80GB-HBM3")
		if diff := cmp.Diff(want, specs[0]); diff != "" {
			t.Errorf("first node (-want +got):\n%s", diff)
		}
	}
	h100 := ProductGPUNode("n", 8, "NVIDIA-H100-80GB-HBM3")
	if got := h100.Capacity[ResourceGPU]; got.Value() != 8 {
		t.Errorf("H100 node GPUs = %s, want 8", got.String())
	}
	wantLabels := map[string]string{
		corev1.LabelInstanceTypeStable: "kwok-gpu-8x", "nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": "8",
		"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.replicas": "1", "nvidia.com/gpu.sharing-strategy": "none",
	}
	if diff := cmp.Diff(wantLabels, h100.Labels); diff != "" {
		t.Errorf("H100 node labels (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]corev1.Taint{GPUTaint}, h100.Taints); diff != "" {
		t.Errorf("H100 node taints (-want +got):\n%s", diff)
	}
}

// GPUNode is the A100 node it always was: same labels, capacity, taint.
func TestGPUNodeUnchanged(t *testing.T) {
	c := capacity("32", "256Gi")
	c[ResourceGPU] = resource.MustParse("4")
	want := NodeSpec{
		Name: GPUNodeName, Capacity: c, Taints: []corev1.Taint{GPUTaint},
		Labels: map[string]string{
			corev1.LabelInstanceTypeStable: "kwok-gpu-4x-a100", "nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": "4",
			"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.memory": "81920", "nvidia.com/gpu.family": "ampere",
			"nvidia.com/gpu.compute.major": "8", "nvidia.com/gpu.compute.minor": "0", "nvidia.com/gpu.replicas": "1",
			"nvidia.com/gpu.sharing-strategy": "none", "nvidia.com/mig.capable": "true",
		},
	}
	if diff := cmp.Diff(want, GPUNode(GPUNodeName, 4)); diff != "" {
		t.Errorf("GPUNode (-want +got):\n%s", diff)
	}
}

// --gpu-nodes replaces the default GPU node: every spoke keeps its CPU node,
// the named ones get their pools, the others nothing more.
func TestWithGPUNodes(t *testing.T) {
	spokes := NamedSpokes(gpuSpokes...)
	WithGPUNodes(spokes, []GPUPool{{"dock", 2, 8, "NVIDIA-H100-80GB-HBM3"}})
	got := [][]string{nodeNames(spokes[0].Nodes), nodeNames(spokes[1].Nodes), nodeNames(spokes[2].Nodes)}
	want := [][]string{{NodeName}, {NodeName, "kwok-node-gpu-0", "kwok-node-gpu-1"}, {NodeName}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("nodes (-want +got):\n%s", diff)
	}
}

// The controller's profile of a stack with GPU nodes on wharf and dock:
// every spoke says capacity = true, gpu and gpu-short are offered where
// there are GPU nodes and withheld on pier, and the default cluster is
// the first spoke, or "auto" where the options say so (crucible dev up).
func TestProfileWithGPUNodes(t *testing.T) {
	spokes := NamedSpokes(gpuSpokes...)
	WithGPUNodes(spokes, []GPUPool{{"wharf", 1, 4, DefaultGPUProduct}, {"dock", 2, 8, "NVIDIA-H100-80GB-HBM3"}})
	s := &Stack{
		Dir: t.TempDir(), CAFile: "/stack/ca.crt", Hub: &Cluster{Name: hubName, Server: "https://127.0.0.1:6443"},
		Federation: &Federation{
			ControllerTokenFile: "/stack/hub.token", ControllerExternalURL: "https://127.0.0.1:8443",
			SpokeTokenFiles: map[string]string{},
		},
		opts: Options{MirrorTTL: time.Second, MirrorMaxStale: time.Minute, SweepInterval: time.Second, OrphanGrace: time.Second, RetryBudget: time.Minute},
	}
	var clusters []*Cluster
	for i, so := range spokes {
		clusters = append(clusters, &Cluster{Name: so.Name, Server: fmt.Sprintf("https://127.0.0.1:%d", 16443+i), Nodes: so.Nodes, LoopNamespace: SpokeNamespace})
		s.Federation.SpokeTokenFiles[so.Name] = "/stack/" + so.Name + ".token"
	}
	s.Spokes = clusters
	text := s.profile(s.Dir, replicaPorts{internal: 8080, external: 8443, metrics: 9090, externalURL: "https://127.0.0.1:8443"}, clusters)
	p, err := profile.Parse([]byte(text))
	if err != nil {
		t.Fatalf("the stack's profile does not parse: %v\n%s", err, text)
	}
	if p.DefaultCluster != "wharf" {
		t.Errorf("default_cluster = %q, want wharf", p.DefaultCluster)
	}
	s.opts.DefaultCluster = profile.AutoCluster
	auto, err := profile.Parse([]byte(s.profile(s.Dir, replicaPorts{internal: 8080, external: 8443, metrics: 9090, externalURL: "https://127.0.0.1:8443"}, clusters)))
	if err != nil {
		t.Fatalf("the stack's profile with DefaultCluster auto does not parse: %v", err)
	}
	if auto.DefaultCluster != profile.AutoCluster {
		t.Errorf("with DefaultCluster auto: default_cluster %q, want auto", auto.DefaultCluster)
	}
	var got []string
	for _, c := range p.Clusters {
		got = append(got, c.Name+" capacity="+boolString(c.Capacity)+" gpu="+boolString(c.OffersClass("gpu"))+" gpu-short="+boolString(c.OffersClass("gpu-short")))
	}
	want := []string{"wharf capacity=true gpu=true gpu-short=true", "dock capacity=true gpu=true gpu-short=true", "pier capacity=true gpu=false gpu-short=false"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("clusters (-want +got):\n%s", diff)
	}
}

func boolString(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

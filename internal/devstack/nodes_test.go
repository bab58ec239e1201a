package devstack

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// The default spoke has a CPU node and a GPU node; any other spoke a CPU
// node only. Options shape them per spoke.
func TestDefaultNodes(t *testing.T) {
	for spoke, want := range map[string][]string{
		DefaultSpokeName: {NodeName, GPUNodeName},
		"dock":           {NodeName},
	} {
		if diff := cmp.Diff(want, nodeNames(DefaultNodes(spoke))); diff != "" {
			t.Errorf("DefaultNodes(%s) (-want +got):\n%s", spoke, diff)
		}
	}
	o := Options{Spokes: []SpokeOptions{{Name: "wharf"}, {Name: "dock"}, {Name: "big", Nodes: []NodeSpec{GPUNode("g", 8)}}}}
	o.setDefaults()
	got := [][]string{nodeNames(o.Spokes[0].Nodes), nodeNames(o.Spokes[1].Nodes), nodeNames(o.Spokes[2].Nodes)}
	if diff := cmp.Diff([][]string{{NodeName, GPUNodeName}, {NodeName}, {"g"}}, got); diff != "" {
		t.Errorf("nodes after setDefaults (-want +got):\n%s", diff)
	}
}

// The Node the stack creates carries the spec's capacity as allocatable too,
// its taints, and the labels every node has beside the spec's; a spec's label
// wins over a default one.
func TestNodeObject(t *testing.T) {
	spec := GPUNode("gpu", 2)
	spec.Labels["type"] = "gpu-kwok"
	n := spec.object()
	if got := n.Status.Allocatable[ResourceGPU]; got.Value() != 2 {
		t.Errorf("allocatable %s = %s, want 2", ResourceGPU, got.String())
	}
	if diff := cmp.Diff(n.Status.Capacity, n.Status.Allocatable); diff != "" {
		t.Errorf("capacity and allocatable differ (-capacity +allocatable):\n%s", diff)
	}
	if diff := cmp.Diff([]corev1.Taint{GPUTaint}, n.Spec.Taints); diff != "" {
		t.Errorf("taints (-want +got):\n%s", diff)
	}
	for k, v := range map[string]string{corev1.LabelHostname: "gpu", corev1.LabelOSStable: "linux", "type": "gpu-kwok", "nvidia.com/gpu.count": "2"} {
		if n.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, n.Labels[k], v)
		}
	}
	if n.Annotations["kwok.x-k8s.io/node"] != "fake" {
		t.Errorf("annotations %v: kwok would not manage the node", n.Annotations)
	}
}

// validateNodes reports every problem of every node, each with its path.
func TestValidateNodesReportsEveryProblem(t *testing.T) {
	noPods := CPUNode("no-pods")
	delete(noPods.Capacity, corev1.ResourcePods)
	zeroPods := CPUNode("zero-pods")
	zeroPods.Capacity[corev1.ResourcePods] = resource.MustParse("0")
	badLabel := CPUNode("bad-label")
	badLabel.Labels["bad key!"] = "v"
	badTaint := CPUNode("bad-taint")
	badTaint.Taints = []corev1.Taint{{Key: "k", Effect: "Sometimes"}}
	tests := []struct {
		name  string
		nodes []NodeSpec
		want  []string
	}{
		{"defaults", DefaultNodes(DefaultSpokeName), nil},
		{"bad name", []NodeSpec{CPUNode("Node_0")}, []string{`s.nodes[0].name "Node_0"`}},
		{"twice", []NodeSpec{CPUNode("a"), CPUNode("a")}, []string{`s.nodes[1].name "a": used twice`}},
		{"pods", []NodeSpec{noPods, zeroPods}, []string{"s.nodes[0].capacity.pods", "s.nodes[1].capacity.pods"}},
		{"label and taint", []NodeSpec{badLabel, badTaint}, []string{"s.nodes[0].labels[bad key!]", `s.nodes[1].taints[0].effect "Sometimes"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := validateNodes("s", tt.nodes)
			var got []string
			for _, err := range errs {
				got = append(got, err.Error())
			}
			if len(got) != len(tt.want) {
				t.Fatalf("errors %q, want %d mentioning %q", got, len(tt.want), tt.want)
			}
			for i, w := range tt.want {
				if !strings.HasPrefix(got[i], w) {
					t.Errorf("error %d = %q, want it to start with %q", i, got[i], w)
				}
			}
		})
	}
}

package capacity

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

func TestSummary(t *testing.T) {
	nodes := []*corev1.Node{
		cpuNode("cpu-0", 64),
		gpuNode("gpu-a", 4, a100),
		gpuNode("gpu-h0", 8, h100),
		gpuNode("gpu-h1", 8, h100),
		gpuNode("gpu-x", 2, ""),
		gpuNode("gpu-down", 8, h100, notReady),
		gpuNode("gpu-cordoned", 8, h100, cordoned),
	}
	v, _ := testView(t, nodes,
		gpuPod("a", 3, on("gpu-h0")),
		gpuPod("b", 1, on("gpu-a")),
		bound(pod("c", "cpu", "10", "memory", "4Gi"), "cpu-0"),
		gpuPod("pending", 8), // unbound: counts nowhere
	)
	v.Reserve("work", "r", gpuPod("r", 2), ttl) // to gpu-h1, 8 free
	want := Summary{
		Synced: true, Nodes: 5, Unavailable: 2,
		GPUs: []GPUs{
			{Product: "", Nodes: 1, Free: 2, Total: 2},
			{Product: a100, Nodes: 1, Free: 3, Total: 4},
			{Product: h100, Nodes: 2, Free: 11, Total: 16},
		},
		// 64 + 4×32 CPUs; a, b, r ask 1 each, c 10.
		CPUMillis:   Amount{Free: 192000 - 13000, Total: 192000},
		MemoryBytes: Amount{Free: 5*64*gi - 4*gi, Total: 5 * 64 * gi},
	}
	got := v.Summary()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Summary (-want +got):\n%s", diff)
	}
	v.hasSynced = func() bool { return false }
	b, err := json.Marshal(v.Summary())
	if err != nil {
		t.Fatal(err)
	}
	const wantJSON = `{"synced":false,"nodes":0,"unavailable_nodes":0,"gpus":[],"cpu_millis":{"free":0,"total":0},"memory_bytes":{"free":0,"total":0}}`
	if string(b) != wantJSON {
		t.Errorf("JSON of an unsynced view's summary:\n got %s\nwant %s", b, wantJSON)
	}
}

package cli

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"

	"crucible.dev/crucible/internal/api/apiv1"
)

// The table says per spoke what is free, or why nothing is known, and with
// a class whether it fits now and why not.
func TestPrintCapacity(t *testing.T) {
	yes, no := true, false
	clusters := []apiv1.ClusterCapacity{
		{Cluster: "wharf", View: true, Synced: true, GPUs: []apiv1.GPUProduct{{Product: "NVIDIA-A100-SXM4-80GB", Free: 1, Total: 4}},
			CPU: &apiv1.Amount{Free: "3500m", Total: "8"}, Memory: &apiv1.Amount{Free: "8Gi", Total: "32Gi"}, Fits: &no, Reason: "1 of 4 nvidia.com/gpu free (needs 2)"},
		{Cluster: "dock", View: true, Synced: true, GPUs: []apiv1.GPUProduct{{Product: "", Free: 16, Total: 16}},
			CPU: &apiv1.Amount{Free: "64", Total: "64"}, Memory: &apiv1.Amount{Free: "256Gi", Total: "256Gi"}, Fits: &yes},
		{Cluster: "pier", View: true, Synced: true, CPU: &apiv1.Amount{Free: "4", Total: "4"}, Memory: &apiv1.Amount{Free: "16Gi", Total: "16Gi"}, Fits: &no, Reason: `class "gpu" is not offered on cluster "pier"`},
		{Cluster: "quay", View: true},
		{Cluster: "reef"},
	}
	var b bytes.Buffer
	if err := printCapacity(&b, clusters, true); err != nil {
		t.Fatal(err)
	}
	want := `CLUSTER  GPUS FREE                  CPU FREE  MEMORY FREE  FITS NOW
wharf    1/4 NVIDIA-A100-SXM4-80GB  3500m/8   8Gi/32Gi     no: 1 of 4 nvidia.com/gpu free (needs 2)
dock     16/16 gpu                  64/64     256Gi/256Gi  yes
pier     none                       4/4       16Gi/16Gi    no: class "gpu" is not offered on cluster "pier"
quay     syncing                    -         -            unknown (syncing)
reef     no view                    -         -            unknown (no view)
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
}

// Contradictory placement flags are refused before anything is sent.
func TestSubmitPlacementFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--cluster", "wharf", "--clusters", "dock"},
		{"--clusters", "dock,dock"},
		{"--cluster", "auto", "--placement", "loose"},
		{"--cluster", "wharf", "--placement", "strict"},
	} {
		var out, errOut bytes.Buffer
		err := Run(t.Context(), append(append([]string{"submit", "--server", "http://127.0.0.1:1", "--image", "busybox"}, args...), "--", "true"), &out, &errOut)
		if err == nil || !bytes.Contains([]byte(err.Error()), []byte("placement flags: ")) {
			t.Errorf("submit %v: %v, want a placement flags error", args, err)
		}
	}
}

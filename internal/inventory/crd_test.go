package inventory

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The embedded CRD is the module's, at the version go.mod pins: a bump of
// cluster-inventory-api that changes it fails here until it is copied.
func TestCRDIsTheModules(t *testing.T) {
	dir, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/cluster-inventory-api").Output()
	if err != nil {
		t.Fatalf("locate sigs.k8s.io/cluster-inventory-api: %v", err)
	}
	want, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(dir)), "config", "crd", "bases", "multicluster.x-k8s.io_clusterprofiles.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(CRD, want) {
		t.Error("internal/inventory/multicluster.x-k8s.io_clusterprofiles.yaml differs from the module's: copy it again")
	}
}

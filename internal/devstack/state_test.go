package devstack

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestEnvName(t *testing.T) {
	for in, want := range map[string]string{"wharf": "WHARF", "gpu-east-1": "GPU_EAST_1"} {
		if got := EnvName(in); got != want {
			t.Errorf("EnvName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestEnvFileQuotesAndListsEveryCluster(t *testing.T) {
	s := &Stack{
		Dir: "/tmp/it's here", CAFile: "/d/ca.crt", EtcdURL: "http://127.0.0.1:1",
		Hub: &Cluster{Name: "hub", Server: "https://127.0.0.1:2", KubeconfigFile: "/d/hub.kubeconfig"},
		Spokes: []*Cluster{
			{Name: "wharf", Server: "https://127.0.0.1:3", KubeconfigFile: "/d/wharf.kubeconfig"},
			{Name: "gpu-east", Server: "https://127.0.0.1:4", KubeconfigFile: "/d/gpu-east.kubeconfig"},
		},
	}
	lines := strings.Split(strings.TrimSpace(s.Env()), "\n")
	want := []string{
		`# crucible dev stack: source this file. Stop the stack with: crucible dev down --dir '/tmp/it'\''s here'`,
		`export CRUCIBLE_DEV_CA='/d/ca.crt'`,
		`export CRUCIBLE_DEV_DIR='/tmp/it'\''s here'`,
		`export ETCD_URL='http://127.0.0.1:1'`,
		`export GPU_EAST_KUBECONFIG='/d/gpu-east.kubeconfig'`,
		`export GPU_EAST_POD_LOGS='/tmp/it'\''s here/pods/gpu-east'`,
		`export GPU_EAST_SERVER='https://127.0.0.1:4'`,
		`export HUB_KUBECONFIG='/d/hub.kubeconfig'`,
		`export HUB_SERVER='https://127.0.0.1:2'`,
		`export WHARF_KUBECONFIG='/d/wharf.kubeconfig'`,
		`export WHARF_POD_LOGS='/tmp/it'\''s here/pods/wharf'`,
		`export WHARF_SERVER='https://127.0.0.1:3'`,
	}
	if diff := cmp.Diff(want, lines); diff != "" {
		t.Errorf("env file (-want +got):\n%s", diff)
	}
}

func TestStopDirWithoutStack(t *testing.T) {
	_, err := StopDir(t.TempDir(), nil)
	if !errors.Is(err, ErrNoStack) {
		t.Fatalf("err = %v, want ErrNoStack", err)
	}
}

func TestStopDirRejectsCorruptState(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, stateFile), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := StopDir(dir, nil)
	if err == nil || !strings.Contains(err.Error(), stateFile) {
		t.Fatalf("err = %v, want an error naming %s", err, stateFile)
	}
}

// A recorded PID that now belongs to another process (here: this test) is
// never signalled.
func TestStopDirSkipsReusedPIDs(t *testing.T) {
	dir := t.TempDir()
	st := `{"dir":"` + dir + `","processes":[{"name":"etcd","pid":` + strconv.Itoa(os.Getpid()) + `}]}`
	if err := os.WriteFile(filepath.Join(dir, stateFile), []byte(st), 0o644); err != nil {
		t.Fatal(err)
	}
	stopped, err := StopDir(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(stopped) != 0 {
		t.Errorf("stopped %v, want nothing", stopped)
	}
}

// kwok gets the node stages only: with a pod stage it would start a pod
// controller and write pod status beside the dev runtime.
func TestKwokConfigHasNodeStagesOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kwok.yaml")
	if err := writeKwokConfig(path); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"name: node-initialize", "name: node-heartbeat-with-lease"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("kwok config lacks %q", want)
		}
	}
	for _, unwanted := range []string{"kind: Pod", "ClusterLogs", "name: pod-"} {
		if strings.Contains(string(data), unwanted) {
			t.Errorf("kwok config has %q", unwanted)
		}
	}
}

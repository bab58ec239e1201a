package cli

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"

	"crucible.dev/crucible/internal/api"
	"crucible.dev/crucible/internal/dispatch"
	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/store/storetest"
	"crucible.dev/crucible/internal/workpod"
)

// recordingDispatcher is the spoke of a CLI test: it keeps the pods the API
// dispatches, as it would hand them to the renderer.
type recordingDispatcher struct {
	mu   sync.Mutex
	pods []workpod.WorkPod
}

func (d *recordingDispatcher) Dispatch(_ context.Context, _ string, w workpod.Valid) (dispatch.Result, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.pods = append(d.pods, w.Pod())
	return dispatch.Result{Namespace: "loops", PodUID: types.UID("uid-1")}, nil
}

func (*recordingDispatcher) Delete(context.Context, string, string, string, types.UID) error {
	return nil
}

func (*recordingDispatcher) FollowLogs(context.Context, string, string, string, time.Time, bool) (io.ReadCloser, error) {
	return io.NopCloser(strings.NewReader("")), nil
}

const classesProfile = `
default_cluster = "wharf"
[controller]
external_url = "https://crucible.example.com"
[[pods.classes]]
name = "standard"
default_for = ["loop", "turn"]
requests = { cpu = "500m", memory = "1Gi" }
[[pods.classes]]
name = "gpu"
gpus = 1
requests = { cpu = "2", memory = "8Gi" }
limits = { memory = "8Gi" }
[pods.classes.allow]
gpus = { min = 1, max = 8 }
resources = { memory = { max = "64Gi" } }
[[clusters]]
name = "wharf"
server = "https://wharf.example.com:6443"
ca_file = "/ca.crt"
token_file = "/token"
loop_namespace = "loops"
turn_service_account = "crucible-turn"
ingest_url = "https://crucible.example.com"
ingest_audience = "crucible-ingest"
[[clusters]]
name = "dock"
server = "https://dock.example.com:6443"
ca_file = "/ca.crt"
token_file = "/token"
loop_namespace = "loops"
turn_service_account = "crucible-turn"
ingest_url = "https://crucible.example.com"
ingest_audience = "crucible-ingest"
[clusters.classes.gpu]
withhold = true
`

func classesFixture(t *testing.T) (*httptest.Server, *recordingDispatcher) {
	t.Helper()
	p, err := profile.Parse([]byte(classesProfile))
	if err != nil {
		t.Fatal(err)
	}
	d := &recordingDispatcher{}
	s := api.New(api.Options{Profile: profile.NewCurrent(p), Store: storetest.SQLite(t), Dispatcher: d, DispatchTimeout: 10 * time.Second,
		Log: slog.New(slog.DiscardHandler), MaxRequestBytes: 1 << 20, AllowedHosts: profile.DefaultAPIAllowedHosts(), PageSize: 10})
	mux := http.NewServeMux()
	s.Routes(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, d
}

func TestClassesLists(t *testing.T) {
	srv, _ := classesFixture(t)
	var out bytes.Buffer
	if err := Run(t.Context(), []string{"classes", "--server", srv.URL}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"CLUSTER  CLASS     DEFAULT FOR  GPUS  REQUESTS             DEADLINE  SHM  YOU MAY CHANGE",
		"wharf    standard  loop,turn    0     cpu=500m,memory=1Gi  6h0m0s    -    --deadline ≤48h0m0s",
		"wharf    gpu       -            1     cpu=2,memory=8Gi     6h0m0s    -    --gpus 1-8, --memory ≤64Gi, --deadline ≤48h0m0s",
		"dock     standard  loop,turn    0     cpu=500m,memory=1Gi  6h0m0s    -    --deadline ≤48h0m0s",
	}
	if diff := cmp.Diff(want, strings.Split(strings.TrimSpace(out.String()), "\n")); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// submit's class flags become the API's ask, and the pod is shaped by it;
// a value out of bounds is the API's 422 naming the field and the bound.
func TestSubmitAsksTheClass(t *testing.T) {
	srv, d := classesFixture(t)
	args := []string{"submit", "--server", srv.URL, "--image", "x", "--class", "gpu", "--gpus", "2", "--memory", "32Gi", "--deadline", "90m", "--", "true"}
	if err := Run(t.Context(), args, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	if len(d.pods) != 1 {
		t.Fatalf("dispatched %d pods", len(d.pods))
	}
	s := d.pods[0].Shape
	gpus, mem := s.Resources.Limits["nvidia.com/gpu"], s.Resources.Requests["memory"]
	if s.Class != "gpu" || gpus.Value() != 2 || mem.String() != "32Gi" || s.DeadlineSeconds != 90*60 {
		t.Errorf("shape %+v: want class gpu, 2 GPUs, 32Gi, 5400 s", s)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--class", "gpu", "--gpus", "9"}, `must be from 1 to 8 for class "gpu"`},
		{[]string{"--class", "gpu", "--cluster", "dock"}, `class "gpu" is not offered on cluster "dock"`},
		{[]string{"--cpu", "4"}, `class "standard" lets submitters change only deadline`},
	} {
		err := Run(t.Context(), append([]string{"submit", "--server", srv.URL, "--image", "x"}, tc.args...), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "422") {
			t.Errorf("submit %v: %v; want a 422 with %q", tc.args, err, tc.want)
		}
	}
}

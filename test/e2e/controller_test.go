package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/workpod"
)

// apiCall sends a JSON request to the controller's internal API.
func apiCall(t testing.TB, s *devstack.Stack, method, path string, body any) (int, []byte) {
	t.Helper()
	code, _, data, err := apiRequest(t.Context(), s, method, path, body, nil)
	if err != nil {
		t.Fatal(err)
	}
	return code, data
}

// apiRequest is apiCall with headers of the caller's, returning the answer's
// headers and a transport error instead of failing the test: a request cut
// by a controller kill is expected to get none.
func apiRequest(ctx context.Context, s *devstack.Stack, method, path string, body any, header http.Header) (int, http.Header, []byte, error) {
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		r = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			return 0, nil, nil, err
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.Federation.ControllerInternalURL+path, r)
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(apiv1.ClientHeader, "e2e")
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, data, err
}

func submit(t testing.TB, s *devstack.Stack, req apiv1.SubmitRequest) apiv1.WorkPod {
	t.Helper()
	code, body := apiCall(t, s, http.MethodPost, "/api/pods", req)
	if code != http.StatusCreated {
		t.Fatalf("submit: %d %s", code, body)
	}
	var wp apiv1.WorkPod
	if err := json.Unmarshal(body, &wp); err != nil {
		t.Fatal(err)
	}
	return wp
}

func getPod(t *testing.T, s *devstack.Stack, id string) apiv1.WorkPod {
	t.Helper()
	code, body := apiCall(t, s, http.MethodGet, "/api/pods/"+id, nil)
	if code != http.StatusOK {
		t.Fatalf("get %s: %d %s", id, code, body)
	}
	var wp apiv1.WorkPod
	if err := json.Unmarshal(body, &wp); err != nil {
		t.Fatal(err)
	}
	return wp
}

// waitPodGone waits until spoke has no pod name in the work pods'
// namespace (deleted and reaped), for at most within.
func waitPodGone(t *testing.T, spoke *devstack.Cluster, name string, within time.Duration) error {
	t.Helper()
	pods := spoke.Client.CoreV1().Pods(devstack.SpokeNamespace)
	return wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
		_, err := pods.Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

// waitState polls the API until the work pod reaches a terminal state, and
// fails the test if it is not want.
func waitState(t *testing.T, s *devstack.Stack, id, want string, within time.Duration) apiv1.WorkPod {
	t.Helper()
	var wp apiv1.WorkPod
	err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, within, true, func(context.Context) (bool, error) {
		wp = getPod(t, s, id)
		switch wp.State {
		case "succeeded", "failed", "cancelled", "lost":
			return true, nil
		}
		return false, nil
	})
	if err != nil || string(wp.State) != want {
		t.Fatalf("work pod %s: state %s (%s), want %s (%v)", id, wp.State, wp.Reason, want, err)
	}
	return wp
}

// sleeps is a work pod command that runs for d (a Go duration) and exits 0:
// the dev runtime runs it as a process.
func sleeps(d string) []string {
	dur, err := time.ParseDuration(d)
	if err != nil {
		panic(err)
	}
	return []string{"sleep", strconv.Itoa(int(dur.Seconds()))}
}

// restoreSpokeAfter is called by a test that stops spoke c's API server on
// the shared stack: when the test ends, c's API server runs again (started
// here if the test did not) and the spoke works as a whole
// (devstack.SettleSpoke), so the tests after it find the spoke as they would
// at any other time — not refusing the controller for a moment, not holding
// new pods in its node agents' reconnect backoff.
func restoreSpokeAfter(t *testing.T, s *devstack.Stack, c *devstack.Cluster) {
	t.Cleanup(func() {
		ctx := context.Background() // t.Context() has ended by now
		if c.Ready(ctx) != nil {
			if err := s.StartAPIServer(ctx, c); err != nil {
				t.Error(err)
				return
			}
		}
		if err := s.SettleSpoke(ctx, c); err != nil {
			t.Error(err)
		}
	})
}

func TestSubmitRunsToCompletionWithLogArtifact(t *testing.T) {
	s := sharedStack(t)
	wharf := s.Spoke("wharf")
	wp := submit(t, s, apiv1.SubmitRequest{
		Image: "registry.example/turn:1", Command: []string{"sh", "-c", `echo "turn started $0"; sleep 3; echo "turn done"`}, Args: []string{"--fast"},
		Env:         []workpod.EnvVar{{Name: "MODE", Value: "fast"}},
		Files:       map[string]string{"input.txt": "hello"},
		SecretFiles: map[string]string{"key": "s3cret"},
	})
	if wp.Cluster != "wharf" || wp.Namespace != devstack.SpokeNamespace || wp.Kind != "turn" || wp.PodUID == "" {
		t.Fatalf("submitted = %+v", wp)
	}
	ctx := t.Context()
	pod, err := wharf.Client.CoreV1().Pods(devstack.SpokeNamespace).Get(ctx, wp.ID, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantLabels := map[string]string{workpod.LabelManagedBy: "crucible", workpod.LabelInstance: devstack.Instance, workpod.LabelWorkPod: wp.ID, workpod.LabelKind: "turn"}
	for k, v := range wantLabels {
		if pod.Labels[k] != v {
			t.Errorf("pod label %s = %q, want %q", k, pod.Labels[k], v)
		}
	}
	env := map[string]string{}
	for _, e := range pod.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	if env["CRUCIBLE_INGEST_URL"] != s.Federation.ControllerExternalURL || env["MODE"] != "fast" {
		t.Errorf("pod env = %v", env)
	}
	if aud := ingestAudience(pod); aud != devstack.IngestAudience {
		t.Errorf("projected ingest token audience = %q, want %q", aud, devstack.IngestAudience)
	}
	cm, err := wharf.Client.CoreV1().ConfigMaps(devstack.SpokeNamespace).Get(ctx, wp.ID+"-files", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sec, err := wharf.Client.CoreV1().Secrets(devstack.SpokeNamespace).Get(ctx, wp.ID+"-secrets", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for name, meta := range map[string]metav1.ObjectMeta{"configmap": cm.ObjectMeta, "secret": sec.ObjectMeta} {
		if len(meta.OwnerReferences) != 1 || meta.OwnerReferences[0].UID != pod.UID {
			t.Errorf("%s owner references = %+v, want the pod %s", name, meta.OwnerReferences, pod.UID)
		}
		if meta.Labels[workpod.LabelWorkPod] != wp.ID || meta.Labels[workpod.LabelInstance] != devstack.Instance {
			t.Errorf("%s labels = %v", name, meta.Labels)
		}
	}
	if cm.Data["input.txt"] != "hello" || string(sec.Data["key"]) != "s3cret" {
		t.Errorf("configmap %v / secret keys %v", cm.Data, sec.Data)
	}

	done := waitState(t, s, wp.ID, "succeeded", time.Minute)
	if done.ExitCode == nil || *done.ExitCode != 0 || !done.LogCollected {
		t.Errorf("finished = %+v, want exit code 0 and the log collected", done)
	}
	code, body := apiCall(t, s, http.MethodGet, "/api/pods/"+wp.ID+"/artifacts/log", nil)
	if want := "turn started --fast\nturn done\n"; code != http.StatusOK || string(body) != want {
		t.Errorf("log artifact: %d %q, want the pod's log %q", code, body, want)
	}
	// Collected and finished: the sweep removes the pod, and the spoke's
	// garbage collector its ConfigMap and Secret.
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := wharf.Client.CoreV1().ConfigMaps(devstack.SpokeNamespace).Get(ctx, wp.ID+"-files", metav1.GetOptions{})
		return err != nil, nil
	})
	if err != nil {
		t.Errorf("pod and its ConfigMap not cleaned up after collection: %v", err)
	}
}

func ingestAudience(pod *corev1.Pod) string {
	for _, v := range pod.Spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, src := range v.Projected.Sources {
			if src.ServiceAccountToken != nil {
				return src.ServiceAccountToken.Audience
			}
		}
	}
	return ""
}

func TestTwoSpokes(t *testing.T) {
	s := sharedStack(t)
	wp := submit(t, s, apiv1.SubmitRequest{Cluster: "dock", Image: "registry.example/turn:1", Command: sleeps("1s")})
	if wp.Cluster != "dock" {
		t.Fatalf("cluster = %q", wp.Cluster)
	}
	if _, err := s.Spoke("dock").Client.CoreV1().Pods(devstack.SpokeNamespace).Get(t.Context(), wp.ID, metav1.GetOptions{}); err != nil {
		t.Errorf("pod not on dock: %v", err)
	}
	if _, err := s.Spoke("wharf").Client.CoreV1().Pods(devstack.SpokeNamespace).Get(t.Context(), wp.ID, metav1.GetOptions{}); err == nil {
		t.Errorf("pod also on wharf")
	}
	waitState(t, s, wp.ID, "succeeded", time.Minute)

	code, body := apiCall(t, s, http.MethodGet, "/api/clusters", nil)
	if code != http.StatusOK {
		t.Fatalf("clusters: %d %s", code, body)
	}
	var clusters []apiv1.Cluster
	if err := json.Unmarshal(body, &clusters); err != nil {
		t.Fatal(err)
	}
	if len(clusters) != 2 || clusters[0].Name != "wharf" || !clusters[0].Default || clusters[1].Name != "dock" || clusters[1].Default {
		t.Fatalf("clusters = %s", body)
	}
	for _, c := range clusters {
		if !c.Health.Reachable || !c.Health.CredentialsValid || c.Health.TokenExpiry == nil || c.Health.LastError != "" {
			t.Errorf("%s health = %+v, want reachable with valid credentials and a token expiry", c.Name, c.Health)
		}
		if c.Live == nil { // the shared stack's other tests make the numbers theirs; internal/api checks them
			t.Errorf("%s has no live pod counts", c.Name)
		}
	}
	code, body = apiCall(t, s, http.MethodGet, "/api/pods?cluster=dock", nil)
	var rows []apiv1.WorkPod
	if code != http.StatusOK || json.Unmarshal(body, &rows) != nil {
		t.Fatalf("list: %d %s", code, body)
	}
	for _, r := range rows {
		if r.Cluster != "dock" {
			t.Errorf("filter cluster=dock returned %s on %s", r.ID, r.Cluster)
		}
	}
}

// newestRow is the id of the newest work pod row ("" when there is none).
func newestRow(t *testing.T, s *devstack.Stack) string {
	t.Helper()
	code, body := apiCall(t, s, http.MethodGet, "/api/pods?limit=1", nil)
	var rows []apiv1.WorkPod
	if err := json.Unmarshal(body, &rows); code != http.StatusOK || err != nil {
		t.Fatalf("list: %d %s (%v)", code, body, err)
	}
	if len(rows) == 0 {
		return ""
	}
	return rows[0].ID
}

func TestBadSubmissions(t *testing.T) {
	s := sharedStack(t)
	before := newestRow(t, s)
	cases := []struct {
		name     string
		body     any
		code     int
		contains string
	}{
		{"unknown cluster", apiv1.SubmitRequest{Cluster: "nope", Image: "x"}, 400, `cluster \"nope\": no such cluster (known: wharf, dock)`},
		{"no image", apiv1.SubmitRequest{}, 400, "image"},
		{"bad env name", apiv1.SubmitRequest{Image: "x", Env: []workpod.EnvVar{{Name: "1BAD", Value: "v"}}}, 400, "env[0].name"},
		{"reserved env name", apiv1.SubmitRequest{Image: "x", Env: []workpod.EnvVar{{Name: "CRUCIBLE_INGEST_URL", Value: "v"}}}, 400, "env[0].name"},
		{"bad file key", apiv1.SubmitRequest{Image: "x", Files: map[string]string{"../etc/passwd": "x"}}, 400, "files"},
		{"bad kind", apiv1.SubmitRequest{Image: "x", Kind: "batch"}, 400, "kind"},
		{"unknown field", []byte(`{"image":"x","imagee":"y"}`), 400, "imagee: Forbidden: unknown field"},
		{"case-mismatched field", []byte(`{"IMAGE":"x"}`), 400, "IMAGE: Forbidden: unknown field"},
		{"malformed JSON", []byte(`{"image":`), 400, "JSON"},
		{"wrong type", []byte(`{"image":42}`), 400, "image"},
		{"over the size limit", []byte(`{"image":"x","args":["` + strings.Repeat("a", 2<<20) + `"]}`), 413, "request body over"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, body := apiCall(t, s, http.MethodPost, "/api/pods", tc.body)
			if code != tc.code || !strings.Contains(string(body), tc.contains) {
				t.Errorf("got %d %s, want %d containing %q", code, body, tc.code, tc.contains)
			}
		})
	}
	// Refused before anything is recorded or dispatched: no new row (and so
	// nothing on a spoke, which only a row's dispatch creates).
	if after := newestRow(t, s); after != before {
		t.Errorf("rejected submissions recorded a row: newest %q before, %q after", before, after)
	}
	for path, want := range map[string]int{"/api/pods/nope-123": 404, "/api/pods?state=bogus": 400, "/api/pods?cluster=nope": 400, "/api/nothing": 404} {
		if code, body := apiCall(t, s, http.MethodGet, path, nil); code != want {
			t.Errorf("GET %s: %d %s, want %d", path, code, body, want)
		}
	}
}

// Taking one verb away from the controller's spoke role makes dispatch fail
// with an error that names the verb and resource, and leaves nothing behind.
func TestMissingRBACVerbIsNamed(t *testing.T) {
	s := sharedStack(t)
	began := time.Now()
	wharf := s.Spoke("wharf")
	roles := wharf.Client.RbacV1().Roles(devstack.SpokeNamespace)
	role, err := roles.Get(t.Context(), "crucible-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	original := role.DeepCopy()
	var rules []rbacv1.PolicyRule
	for _, r := range role.Rules {
		if len(r.Resources) == 1 && r.Resources[0] == "configmaps" {
			continue
		}
		rules = append(rules, r)
	}
	if len(rules) != len(role.Rules)-1 {
		t.Fatalf("role rules %+v: want exactly one configmaps rule", role.Rules)
	}
	role.Rules = rules
	if _, err := roles.Update(t.Context(), role, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cur, err := roles.Get(context.Background(), "crucible-controller", metav1.GetOptions{})
		if err == nil {
			cur.Rules = original.Rules
			_, err = roles.Update(context.Background(), cur, metav1.UpdateOptions{})
		}
		if err != nil {
			t.Errorf("restore role: %v", err)
		}
	})
	// RBAC changes reach the authorizer's cache quickly but not instantly.
	var code int
	var body []byte
	_ = wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		// With a command: without one the dev runtime fails the pod at once
		// (DevRuntimeNeedsCommand), and in the moment between its create and
		// the dispatcher's delete the watch could record that failure first
		// (ci17). With one it waits for its ConfigMap, which never comes.
		code, body = apiCall(t, s, http.MethodPost, "/api/pods", apiv1.SubmitRequest{Image: "x", Command: sleeps("1s"), Files: map[string]string{"a": "b"}})
		return code != http.StatusCreated, nil
	})
	if code != http.StatusBadGateway || !strings.Contains(string(body), `cannot create resource \"configmaps\"`) {
		t.Errorf("submit without configmaps create: %d %s, want 502 naming create and configmaps", code, body)
	}
	submitted := fmt.Sprintf("%d %s", code, body)
	// The failed row is the one failed row since this test began whose
	// reason names configmaps (other tests' rows, also ones that fail while
	// this test runs, have other reasons); nothing of it may stay on the
	// spoke (the pod was never created; the dispatcher removes what it did
	// create). Other tests' objects come and go meanwhile: only this row's
	// are counted.
	code, body = apiCall(t, s, http.MethodGet, "/api/pods?state=failed&limit=100", nil)
	var failed, ours []apiv1.WorkPod
	if err := json.Unmarshal(body, &failed); code != http.StatusOK || err != nil {
		t.Fatalf("failed rows: %d %s (%v)", code, body, err)
	}
	for _, wp := range failed {
		if wp.CreatedAt.After(began) && strings.Contains(wp.Reason, "configmaps") {
			ours = append(ours, wp)
		}
	}
	if len(ours) != 1 {
		t.Fatalf("failed rows since the test began naming configmaps: %+v, want exactly one; the last submit answered %s; rows since the test began: %s",
			ours, submitted, rowsSince(t, s, began))
	}
	id := ours[0].ID
	err = wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return objectsOf(t, wharf, id) == 0, nil
	})
	if err != nil {
		t.Errorf("a failed dispatch left %d objects of %s on the spoke", objectsOf(t, wharf, id), id)
	}
}

// rowsSince lists the rows created since began, newest first, each with its
// state and reason: what a failing test shows of what happened meanwhile.
func rowsSince(t *testing.T, s *devstack.Stack, began time.Time) string {
	t.Helper()
	code, body := apiCall(t, s, http.MethodGet, "/api/pods?limit=100", nil)
	var rows []apiv1.WorkPod
	if err := json.Unmarshal(body, &rows); code != http.StatusOK || err != nil {
		return fmt.Sprintf("(list: %d %s)", code, body)
	}
	var b strings.Builder
	for _, wp := range rows {
		if wp.CreatedAt.After(began) {
			fmt.Fprintf(&b, "\n  %s %s %s %q", wp.CreatedAt.Format(time.RFC3339Nano), wp.ID, wp.State, wp.Reason)
		}
	}
	return b.String()
}

// objectsOf counts the pods, config maps and secrets of work pod id on spoke.
func objectsOf(t *testing.T, spoke *devstack.Cluster, id string) int {
	t.Helper()
	sel := metav1.ListOptions{LabelSelector: workpod.LabelWorkPod + "=" + id}
	ns := devstack.SpokeNamespace
	pods, err := spoke.Client.CoreV1().Pods(ns).List(t.Context(), sel)
	if err != nil {
		t.Fatal(err)
	}
	cms, err := spoke.Client.CoreV1().ConfigMaps(ns).List(t.Context(), sel)
	if err != nil {
		t.Fatal(err)
	}
	secrets, err := spoke.Client.CoreV1().Secrets(ns).List(t.Context(), sel)
	if err != nil {
		t.Fatal(err)
	}
	return len(pods.Items) + len(cms.Items) + len(secrets.Items)
}

func TestCancel(t *testing.T) {
	s := sharedStack(t)
	wp := submit(t, s, apiv1.SubmitRequest{Image: "x", Command: sleeps("1h")})
	code, body := apiCall(t, s, http.MethodPost, "/api/pods/"+wp.ID+"/cancel", nil)
	if code != http.StatusOK || !strings.Contains(string(body), `"state": "cancelled"`) {
		t.Fatalf("cancel: %d %s", code, body)
	}
	err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := s.Spoke("wharf").Client.CoreV1().Pods(devstack.SpokeNamespace).Get(ctx, wp.ID, metav1.GetOptions{})
		return err != nil, nil
	})
	if err != nil {
		t.Errorf("cancelled pod still on the spoke")
	}
	if code, _ := apiCall(t, s, http.MethodPost, "/api/pods/"+wp.ID+"/cancel", nil); code != http.StatusConflict {
		t.Errorf("second cancel: %d, want 409", code)
	}
	if got := getPod(t, s, wp.ID).State; got != "cancelled" {
		t.Errorf("state after cancel = %s", got)
	}
}

func TestFailedPodRecordsExitCode(t *testing.T) {
	s := sharedStack(t)
	wp := submit(t, s, apiv1.SubmitRequest{Image: "x", Command: []string{"sh", "-c", "sleep 1; exit 7"}})
	done := waitState(t, s, wp.ID, "failed", time.Minute)
	if done.ExitCode == nil || *done.ExitCode != 7 || !done.LogCollected {
		t.Errorf("failed pod = %+v, want exit code 7 with its log collected", done)
	}
}

package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/cli"
	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
	"crucible.dev/crucible/internal/reconcile"
	"crucible.dev/crucible/internal/workpod"
)

// haLease and haTakeover are the HA tests' lease and takeover bound.
const haLease, haTakeover = devstacktest.HALease, devstacktest.HATakeover

// haCall sends a JSON request to one replica's API.
func haCall(t *testing.T, r devstack.Replica, method, path string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, _ := http.NewRequestWithContext(t.Context(), method, r.InternalURL+path, rd)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(apiv1.ClientHeader, "e2e")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s on %s: %v", method, path, r.Process, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// postSubmit sends req to the API at apiURL as `crucible submit` does: with
// Idempotency-Key key, and once more with the same key, up to three sends,
// when a send heard no answer. Concurrent submitters need it under load:
// net/http dials connections it may not use at once, the server closes one
// that brings no request within its ReadHeaderTimeout (10 s), and a client
// that had no time to notice writes its POST on it and reads EOF (seen in
// the fleet tests: "Post …: EOF" on a connection pooled 8 s, which the
// controller had accepted and closed 10.0 s later without a request). The
// key makes a resend answer the pod the first send made, never a second.
func postSubmit(ctx context.Context, client *http.Client, apiURL string, req apiv1.SubmitRequest, key string) (int, []byte, error) {
	data, err := json.Marshal(req)
	if err != nil {
		return 0, nil, err
	}
	for attempt := 1; ; attempt++ {
		r, err := http.NewRequestWithContext(ctx, http.MethodPost, apiURL+"/api/pods", bytes.NewReader(data))
		if err != nil {
			return 0, nil, err
		}
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set(apiv1.ClientHeader, "e2e")
		r.Header.Set(apiv1.IdempotencyKeyHeader, key)
		resp, err := client.Do(r)
		if err != nil {
			if attempt == 3 || ctx.Err() != nil {
				return 0, nil, fmt.Errorf("%d sends with Idempotency-Key %s: %w", attempt, key, err)
			}
			continue
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, body, err
	}
}

// Two controller processes on one PostgreSQL (R-C10): both answer the API,
// exactly one runs the loops; an artifact pushed through one downloads from
// the other; SIGKILL of the leader with 50 pods in flight hands the loops to
// the other within the lease, and every pod completes once — no pod
// dispatched twice, no row lost, every log collected.
func TestHATwoControllersOnePostgres(t *testing.T) {
	t.Parallel() // a stack of its own: see doc.go
	s, _ := ownStackOnPostgres(t, devstack.Options{
		Crucible: devstacktest.BuildCrucible, LeaderElect: true, SingleLeader: true, LeaseDuration: haLease,
		// The sweep would delete collected pods: keep them to count them.
		SweepInterval: time.Hour, OrphanGrace: time.Hour, RetryBudget: 30 * time.Second,
		Spokes: devstack.NamedSpokes("wharf", "dock"),
	})
	a, b := devstacktest.Replicas(t, s)

	for _, r := range []devstack.Replica{a, b} {
		if code, body := haCall(t, r, http.MethodGet, "/api/clusters", nil); code != http.StatusOK {
			t.Fatalf("%s: GET /api/clusters = %d %s", r.Process, code, body)
		}
	}
	leader, err := devstacktest.SoleLeader(t.Context(), 2*haLease, a, b)
	if err != nil {
		t.Fatal(err)
	}
	follower := b
	if leader == b {
		follower = a
	}
	t.Logf("leader %s, follower %s", leader.Process, follower.Process)

	t.Run("artifact pushed through one replica downloads from the other", func(t *testing.T) {
		crossReplicaArtifact(t, s, follower, leader)
	})
	t.Run("a spoke removed from both profiles leaves the follower too", func(t *testing.T) {
		removedSpokeLeavesEveryReplica(t, s, leader, follower)
	})

	// 50 pods in flight, submitted through both replicas at once.
	const pods = 50
	ids, uids := submitVia(t, []devstack.Replica{a, b}, pods, 0, func(int) apiv1.SubmitRequest {
		return apiv1.SubmitRequest{Image: "x", Command: []string{"sh", "-c", "echo start $0; sleep 5; echo done"}}
	})

	killed := time.Now()
	if err := s.KillProcess(leader.Process); err != nil {
		t.Fatal(err)
	}
	// The lease was not released: the follower waits it out, then leads.
	if _, err := devstacktest.SoleLeader(t.Context(), haTakeover, follower); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s took over %s after the SIGKILL (lease %s)", follower.Process, time.Since(killed).Round(100*time.Millisecond), haLease)

	// Every pod completes once, its log collected, through the survivor.
	err = wait.PollUntilContextTimeout(t.Context(), time.Second, 3*time.Minute, true, func(context.Context) (bool, error) {
		for _, id := range ids {
			code, body := haCall(t, follower, http.MethodGet, "/api/pods/"+id, nil)
			var wp apiv1.WorkPod
			if code != http.StatusOK || json.Unmarshal(body, &wp) != nil || !wp.LogCollected {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("not every pod finished with its log collected: %v", err)
	}
	for i, id := range ids {
		code, body := haCall(t, follower, http.MethodGet, "/api/pods/"+id, nil)
		var wp apiv1.WorkPod
		if err := json.Unmarshal(body, &wp); err != nil || code != http.StatusOK {
			t.Fatalf("get %s: %d %s", id, code, body)
		}
		if wp.State != "succeeded" || wp.ExitCode == nil || *wp.ExitCode != 0 || wp.PodUID != uids[i] {
			t.Errorf("work pod %s: state %s exit %v uid %s (%s); want succeeded, 0, uid %s", id, wp.State, wp.ExitCode, wp.PodUID, wp.Reason, uids[i])
		}
		code, log := haCall(t, follower, http.MethodGet, "/api/pods/"+id+"/artifacts/log", nil)
		if code != http.StatusOK || !strings.Contains(string(log), "done") {
			t.Errorf("log of %s: %d %q", id, code, log)
		}
	}
	// No pod twice on the spoke: one pod per work pod, the one dispatched.
	list, err := s.Spoke("wharf").Client.CoreV1().Pods(devstack.SpokeNamespace).List(t.Context(), metav1.ListOptions{LabelSelector: reconcile.Selector(devstack.Instance).String()})
	if err != nil {
		t.Fatal(err)
	}
	perRow := map[string][]string{}
	for _, p := range list.Items {
		id := p.Labels[workpod.LabelWorkPod]
		perRow[id] = append(perRow[id], string(p.UID))
	}
	for i, id := range ids {
		if got := perRow[id]; len(got) != 1 || got[0] != uids[i] {
			t.Errorf("work pod %s has pods %v on the spoke, want exactly [%s]", id, got, uids[i])
		}
	}

	t.Run("a leader that loses its lease stops and exits non-zero", func(t *testing.T) {
		stealLease(t, s)
		ctx, cancel := context.WithTimeout(t.Context(), haLease+haTakeover)
		defer cancel()
		code, logFile, err := s.WaitExit(ctx, follower.Process)
		if err != nil {
			t.Fatal(err)
		}
		logs, _ := os.ReadFile(logFile)
		if code == 0 || !strings.Contains(string(logs), "leader lease lost") {
			t.Errorf("%s after its lease was taken: exit code %d, log says lease lost: %v", follower.Process, code, strings.Contains(string(logs), "leader lease lost"))
		}
	})
}

// removedSpokeLeavesEveryReplica removes dock from both replicas' profiles
// while a pod runs there. The leader drains it; the follower, which runs no
// loops, lists it as draining until the store has no live row of dock, and
// then forgets it as the leader does, without a restart.
func removedSpokeLeavesEveryReplica(t *testing.T, s *devstack.Stack, leader, follower devstack.Replica) {
	code, body := haCall(t, leader, http.MethodPost, "/api/pods", apiv1.SubmitRequest{Image: "x", Cluster: "dock", Command: sleeps("8s")})
	var wp apiv1.WorkPod
	if code != http.StatusCreated || json.Unmarshal(body, &wp) != nil {
		t.Fatalf("submit to dock: %d %s", code, body)
	}
	pids := s.Processes()
	for _, r := range []devstack.Replica{leader, follower} {
		text, err := s.ReplicaProfile(r, "wharf")
		if err != nil {
			t.Fatal(err)
		}
		replaceProfile(t, r.ProfileFile, text)
	}
	dock := func(r devstack.Replica) (apiv1.Cluster, bool) {
		code, body := haCall(t, r, http.MethodGet, "/api/clusters", nil)
		var clusters []apiv1.Cluster
		if code != http.StatusOK || json.Unmarshal(body, &clusters) != nil {
			t.Fatalf("%s: /api/clusters = %d %s", r.Process, code, body)
		}
		return clusterNamed(clusters, "dock")
	}
	// Seen draining on the follower while dock's pod still runs.
	err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		c, ok := dock(follower)
		return ok && c.Draining, nil
	})
	if err != nil {
		t.Fatalf("%s never listed dock as draining: %v", follower.Process, err)
	}
	for _, r := range []devstack.Replica{leader, follower} {
		err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
			_, ok := dock(r)
			return !ok, nil
		})
		if err != nil {
			c, _ := dock(r)
			t.Fatalf("%s still lists dock after its drain: %+v", r.Process, c)
		}
	}
	code, body = haCall(t, follower, http.MethodGet, "/api/pods/"+wp.ID, nil)
	if code != http.StatusOK || json.Unmarshal(body, &wp) != nil || wp.State != "succeeded" || !wp.LogCollected {
		t.Errorf("dock's pod after the drain: %d %s; want succeeded with its log", code, body)
	}
	for _, r := range []devstack.Replica{leader, follower} {
		if now := s.Processes()[r.Process]; now != pids[r.Process] {
			t.Errorf("%s was restarted (pid %d → %d)", r.Process, pids[r.Process], now)
		}
	}
}

// stealLease makes another holder take the stack's leader Lease, as a
// replica would after this one failed to renew in time.
func stealLease(t *testing.T, s *devstack.Stack) {
	t.Helper()
	leases := s.Hub.Client.CoordinationV1().Leases(devstack.HubNamespace)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := leases.Get(t.Context(), devstack.Instance+"-leader", metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.NewMicroTime(time.Now())
		thief, hour := "thief", int32(3600)
		l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.AcquireTime, l.Spec.RenewTime = &thief, &hour, &now, &now
		_, err = leases.Update(t.Context(), l, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("steal the lease: %v", err)
	}
}

// crossReplicaArtifact: a pod dispatched through one replica pushes through
// that replica's drop-box, and the other serves the bytes with the same
// sha256; a second push of the same bytes is 200 there too.
func crossReplicaArtifact(t *testing.T, s *devstack.Stack, via, other devstack.Replica) {
	code, body := haCall(t, via, http.MethodPost, "/api/pods", apiv1.SubmitRequest{Image: "x", Command: sleeps("1h")})
	var wp apiv1.WorkPod
	if code != http.StatusCreated || json.Unmarshal(body, &wp) != nil {
		t.Fatalf("submit via %s: %d %s", via.Process, code, body)
	}
	// The leader's informer drives a pod another replica dispatched (one
	// origin instance for all replicas): only its reconciler writes running.
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		code, body := haCall(t, via, http.MethodGet, "/api/pods/"+wp.ID, nil)
		var got apiv1.WorkPod
		return code == http.StatusOK && json.Unmarshal(body, &got) == nil && got.State == "running", nil
	})
	if err != nil {
		t.Fatalf("pod %s dispatched through %s never marked running by the leader %s: %v", wp.ID, via.Process, other.Process, err)
	}
	t.Cleanup(func() { // t.Context() has ended by now
		req, _ := http.NewRequest(http.MethodPost, other.InternalURL+"/api/pods/"+wp.ID+"/cancel", nil)
		req.Header.Set(apiv1.ClientHeader, "e2e")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	})
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(ingestToken(t, s.Spoke("wharf"), devstack.SpokeServiceAccount, wp.ID, wp.PodUID)), 0o600); err != nil {
		t.Fatal(err)
	}
	content := make([]byte, 3<<20+123) // several 1 MiB chunks
	_, _ = rand.Read(content)
	file := filepath.Join(dir, "result.bin")
	if err := os.WriteFile(file, content, 0o600); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(content)
	want := hex.EncodeToString(sum[:])
	for range 2 { // stored, then the same bytes again
		var out, stderr bytes.Buffer
		if err := cli.Run(t.Context(), []string{"push", "--url", via.ExternalURL, "--pod", wp.ID, "--token-file", tokenFile,
			"--ca-file", s.CAFile, "--timeout", "1m", "result", file}, &out, &stderr); err != nil {
			t.Fatalf("push via %s: %v: %s", via.Process, err, stderr.String())
		}
		if !strings.Contains(out.String(), want) {
			t.Errorf("push printed %q, want sha256 %s", out.String(), want)
		}
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, other.InternalURL+"/api/pods/"+wp.ID+"/artifacts/result", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	h := sha256.New()
	n, err := io.Copy(h, resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("download from %s: %d, %v", other.Process, resp.StatusCode, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want || n != int64(len(content)) || resp.Header.Get("X-Crucible-SHA256") != want {
		t.Errorf("downloaded from %s: %d bytes sha256 %s (header %s), pushed %d bytes sha256 %s", other.Process, n, got,
			resp.Header.Get("X-Crucible-SHA256"), len(content), want)
	}
}

// submitVia submits n pods, pod i as req(i) through replicas[i%len], at
// most limit at once (0: all at once), failing the test on any answer but
// 201; it returns their ids and the pod uids they were dispatched with.
func submitVia(t *testing.T, replicas []devstack.Replica, n, limit int, req func(i int) apiv1.SubmitRequest) (ids, uids []string) {
	t.Helper()
	if limit <= 0 {
		limit = n
	}
	ids, uids = make([]string, n), make([]string, n)
	errs := make([]error, n)
	runID := strconv.FormatInt(time.Now().UnixNano(), 36)
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for i := range n {
		via := replicas[i%len(replicas)]
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			code, body, err := postSubmit(t.Context(), http.DefaultClient, via.InternalURL, req(i), fmt.Sprintf("e2e-%s-%d", runID, i))
			if err != nil {
				errs[i] = fmt.Errorf("submit %d via %s: %w", i, via.Process, err)
				return
			}
			var wp apiv1.WorkPod
			if code != http.StatusCreated || json.Unmarshal(body, &wp) != nil {
				errs[i] = fmt.Errorf("submit %d via %s: %d %s", i, via.Process, code, body)
				return
			}
			ids[i], uids[i] = wp.ID, wp.PodUID
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return ids, uids
}

// awaitSucceededOnce waits (within) until every work pod of ids has its log
// collected, read through replica via, then checks each succeeded with
// the pod uid it was dispatched with (uids, as submitVia returns them): it
// ran once, never dispatched again by a new owner of its spoke.
func awaitSucceededOnce(t *testing.T, via devstack.Replica, ids, uids []string, within time.Duration) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), time.Second, within, true, func(context.Context) (bool, error) {
		for _, id := range ids {
			code, body := haCall(t, via, http.MethodGet, "/api/pods/"+id, nil)
			var wp apiv1.WorkPod
			if code != http.StatusOK || json.Unmarshal(body, &wp) != nil || !wp.LogCollected {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("not every pod completed with its log (read through %s): %v", via.Process, err)
	}
	for i, id := range ids {
		code, body := haCall(t, via, http.MethodGet, "/api/pods/"+id, nil)
		var wp apiv1.WorkPod
		if err := json.Unmarshal(body, &wp); code != http.StatusOK || err != nil {
			t.Fatalf("%s: %d %s", id, code, body)
		}
		if wp.State != "succeeded" || wp.PodUID != uids[i] {
			t.Errorf("%s on %s: %s (%s), pod uid %s, dispatched as %s: want succeeded once", id, wp.Cluster, wp.State, wp.Reason, wp.PodUID, uids[i])
		}
	}
}

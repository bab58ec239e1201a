package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/devstack"
	_ "crucible.dev/crucible/internal/store" // registers the sqlite driver
)

// postKeyed submits req with Idempotency-Key key (apiRequest: a submit cut
// by a controller kill gets an error, not a failed test).
func postKeyed(ctx context.Context, s *devstack.Stack, key string, req apiv1.SubmitRequest) (int, http.Header, []byte, error) {
	return apiRequest(ctx, s, http.MethodPost, "/api/pods", req, http.Header{apiv1.IdempotencyKeyHeader: {key}})
}

// A submit cut by a controller kill before its dispatch — its row persisted,
// no pod made, because wharf's API server was down and the dispatch was
// retrying — runs once the controller is back instead of ending lost: the
// startup reconcile dispatches a row without secret files from its stored
// spec; one with secret files (the store keeps only their digests) waits,
// saying so, and the replay of its submit under its first Idempotency-Key
// dispatches it. Neither makes a second row.
func TestSubmitCutBeforeDispatchRuns(t *testing.T) {
	s := sharedStack(t)
	wharf := s.Spoke("wharf")
	began := time.Now()
	run := fmt.Sprintf("cut-%d", began.UnixNano())
	plain := apiv1.SubmitRequest{Cluster: "wharf", Image: "x", Command: sleeps("1s")}
	secret := apiv1.SubmitRequest{Cluster: "wharf", Image: "x", Command: sleeps("1s"), SecretFiles: map[string]string{"token": "s3cret"}}

	restoreSpokeAfter(t, s, wharf)
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = s.RestartProcess(context.Background(), "crucible-controller", s.ControllerReady)
		}
	})
	if err := s.StopAPIServer(wharf); err != nil {
		t.Fatal(err)
	}
	for key, req := range map[string]apiv1.SubmitRequest{run + "-plain": plain, run + "-secret": secret} {
		go func() { _, _, _, _ = postKeyed(context.Background(), s, key, req) }() // cut by the kill below
	}
	// Both rows persisted, their dispatches retrying against the stopped
	// API server: now the kill cuts them.
	var rows []apiv1.WorkPod
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		code, body := apiCall(t, s, http.MethodGet, "/api/pods?cluster=wharf&state=pending&limit=100", nil)
		var all []apiv1.WorkPod
		if code != http.StatusOK || json.Unmarshal(body, &all) != nil {
			return false, nil
		}
		rows = rows[:0]
		for _, wp := range all {
			if wp.CreatedAt.After(began) {
				rows = append(rows, wp)
			}
		}
		return len(rows) == 2, nil
	})
	if err != nil {
		t.Fatalf("pending rows of the two submits: %+v", rows)
	}
	if err := s.KillProcess("crucible-controller"); err != nil {
		t.Fatal(err)
	}
	// As if the controller had been away longer than the dispatch timeout,
	// after which no submit's own dispatch can still be running: the
	// startup reconcile judges the rows at once instead of in 2m30s.
	backdate(t, filepath.Join(s.Dir, "crucible", "crucible.db"), 10*time.Minute, rows[0].ID, rows[1].ID)
	if err := s.StartAPIServer(t.Context(), wharf); err != nil {
		t.Fatal(err)
	}
	restarted = true
	if err := s.RestartProcess(t.Context(), "crucible-controller", s.ControllerReady); err != nil {
		t.Fatal(err)
	}

	var plainRow, secretRow apiv1.WorkPod
	for _, wp := range rows {
		if wp = getPod(t, s, wp.ID); len(wp.SecretFileNames) > 0 { // a list shows no spec
			secretRow = wp
		} else {
			plainRow = wp
		}
	}
	if plainRow.ID == "" || secretRow.ID == "" {
		t.Fatalf("rows %+v: want one without and one with a secret file", rows)
	}
	done := waitState(t, s, plainRow.ID, "succeeded", 2*time.Minute)
	if !done.LogCollected || done.PodUID == "" {
		t.Errorf("the row dispatched at startup: %+v, want its log collected", done)
	}
	// The row with a secret file waits for its replay, saying why.
	err = wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		secretRow = getPod(t, s, secretRow.ID)
		return strings.Contains(secretRow.Reason, "Idempotency-Key"), nil
	})
	if err != nil || secretRow.State != "pending" || secretRow.PodUID != "" {
		t.Fatalf("the row with a secret file after startup: %s %q (%v), want pending, awaiting its replay", secretRow.State, secretRow.Reason, err)
	}
	code, h, body, err := postKeyed(t.Context(), s, run+"-secret", secret)
	if err != nil || code != http.StatusCreated || h.Get(apiv1.ReplayedHeader) != "true" {
		t.Fatalf("replay: %d %s (%v), want 201 replayed", code, body, err)
	}
	var replayed apiv1.WorkPod
	if err := json.Unmarshal(body, &replayed); err != nil || replayed.ID != secretRow.ID || replayed.State == "pending" {
		t.Fatalf("replay answered %s, want %s dispatched", body, secretRow.ID)
	}
	done = waitState(t, s, secretRow.ID, "succeeded", 2*time.Minute)
	if !done.LogCollected {
		t.Errorf("the replayed row: %+v, want its log collected", done)
	}
	// Nothing else was made of the two submits: their rows, backdated,
	// were created before the test began, and no row since (tests on the
	// shared stack run one at a time).
	code, body = apiCall(t, s, http.MethodGet, "/api/pods?cluster=wharf&limit=100", nil)
	var all []apiv1.WorkPod
	if err := json.Unmarshal(body, &all); code != http.StatusOK || err != nil {
		t.Fatalf("list: %d %s", code, body)
	}
	for _, wp := range all {
		if wp.CreatedAt.After(began) {
			t.Errorf("row %s (%s) made since the cut submits", wp.ID, wp.State)
		}
	}
}

// backdate moves the creation time of the rows ids in the controller's
// SQLite store back by d, while the controller is stopped.
func backdate(t *testing.T, path string, d time.Duration, ids ...string) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, id := range ids {
		res, err := db.ExecContext(t.Context(), `UPDATE work_pods SET created_at = created_at - ?, updated_at = updated_at - ? WHERE id = ?`, d.Nanoseconds(), d.Nanoseconds(), id)
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			t.Fatalf("backdate %s: %d rows", id, n)
		}
	}
}

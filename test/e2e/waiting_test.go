package e2e

// Why a pod waits and what happened to it, as kube-scheduler and the dev
// runtime say it on the spoke: the row keeps the scheduler's verdict while
// it holds, and every pod keeps its history.

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/store"
)

// A gpu pod asking 5 GPUs — within its class, more than wharf's GPU node
// has — stays pending, and the API and `crucible pods get` say why with
// the scheduler's own message; its history shows when it was made,
// dispatched and began to wait. Cancelled, it waits no more and its
// history ends with the cancel.
func TestWaitingPodSaysWhy(t *testing.T) {
	s := sharedStack(t)
	gpus := 5
	wp := submit(t, s, apiv1.SubmitRequest{Cluster: "wharf", Image: "busybox", Command: sleeps("1h"), Class: "gpu", GPUs: &gpus})
	t.Cleanup(func() { cancelPodQuietly(s, wp.ID) })

	waiting := waitWaiting(t, s, wp.ID, time.Minute)
	if w := waiting.Waiting; w.Reason != "Unschedulable" || !strings.Contains(w.Message, "Insufficient nvidia.com/gpu") {
		t.Errorf("waiting %+v, want Unschedulable saying Insufficient nvidia.com/gpu", w)
	}
	if waiting.State != store.StateDispatched || waiting.Node != "" {
		t.Errorf("state %s on node %q, want dispatched and on none", waiting.State, waiting.Node)
	}
	if w := waiting.Waiting; w.Since.Before(waiting.CreatedAt) || w.Since.After(time.Now()) {
		t.Errorf("waiting since %v, want between the pod's creation %v and now", w.Since, waiting.CreatedAt)
	}
	if got := whats(waiting.History); !isSubsequence([]string{"pending", "dispatched", "waiting"}, got) || slices.Contains(got, "scheduled") {
		t.Errorf("history %v, want pending, dispatched and waiting, never scheduled", got)
	}
	checkTimes(t, waiting)

	out, errOut, err := crucibleCLI(t, s, []string{"pods", "get"}, wp.ID)
	if err != nil {
		t.Fatalf("pods get: %v (%s)", err, errOut)
	}
	t.Logf("pods get of the waiting pod:\n%s", out)
	for _, want := range []string{"waiting: Unschedulable", "Insufficient nvidia.com/gpu", "TIME", "WHAT", "WAIT", "dispatched", waiting.CreatedAt.UTC().Format("2006-01-02T15:04:05")} {
		if !strings.Contains(out, want) {
			t.Errorf("pods get lacks %q:\n%s", want, out)
		}
	}

	if out, errOut, err := crucibleCLI(t, s, []string{"pods", "cancel"}, wp.ID); err != nil {
		t.Fatalf("pods cancel: %q %v (%s)", out, err, errOut)
	}
	cancelled := getPod(t, s, wp.ID)
	last := cancelled.History[len(cancelled.History)-1]
	if cancelled.Waiting != nil || last.State != store.StateCancelled || last.Reason != "cancelled through the API" {
		t.Errorf("after cancel: waiting %+v, last entry %+v; want no wait and the cancel last", cancelled.Waiting, last)
	}
	checkTimes(t, cancelled)
	out, _, err = crucibleCLI(t, s, []string{"pods", "get"}, wp.ID)
	t.Logf("pods get after the cancel:\n%s", out)
	if err != nil || !strings.Contains(out, "cancelled through the API") || strings.Contains(out, "\nwaiting ") {
		t.Errorf("pods get after cancel (%v):\n%s\nwant the cancel in the history and no wait", err, out)
	}
}

// A pod that runs to the end keeps the moments of its start with its
// states: scheduled on the node kube-scheduler chose, started, finished.
func TestFinishedPodHistory(t *testing.T) {
	s := sharedStack(t)
	wp := submit(t, s, apiv1.SubmitRequest{Cluster: "wharf", Image: "busybox", Command: sleeps("1s")})
	done := waitState(t, s, wp.ID, "succeeded", 2*time.Minute)
	if done.Node != devstack.NodeName || done.Waiting != nil {
		t.Errorf("finished on node %q waiting %+v, want %s and no wait", done.Node, done.Waiting, devstack.NodeName)
	}
	if got := whats(done.History); !isSubsequence([]string{"pending", "scheduled", "started", "succeeded"}, got) ||
		!slices.Contains(got, "dispatched") || got[len(got)-1] != "succeeded" {
		t.Errorf("history %v, want pending, dispatched, scheduled, started … succeeded last", got)
	}
	for _, e := range done.History {
		if e.Event == store.EventScheduled && e.Message != devstack.NodeName {
			t.Errorf("scheduled entry %+v, want node %s", e, devstack.NodeName)
		}
	}
	checkTimes(t, done)
	out, errOut, err := crucibleCLI(t, s, []string{"pods", "get"}, wp.ID)
	t.Logf("pods get of the finished pod:\n%s", out)
	if err != nil || !strings.Contains(out, "on "+devstack.NodeName) || !strings.Contains(out, "succeeded") {
		t.Errorf("pods get: %v (%s)\n%s\nwant the node and the end in the history", err, errOut, out)
	}
}

// waitWaiting polls the API until the pod waits.
func waitWaiting(t *testing.T, s *devstack.Stack, id string, within time.Duration) apiv1.WorkPod {
	t.Helper()
	var wp apiv1.WorkPod
	err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, within, true, func(context.Context) (bool, error) {
		code, _ := apiCall(t, s, http.MethodGet, "/api/pods/"+id, nil)
		if code != http.StatusOK {
			return false, nil
		}
		wp = getPod(t, s, id)
		return wp.Waiting != nil, nil
	})
	if err != nil {
		t.Fatalf("work pod %s never waiting: state %s, history %+v", id, wp.State, wp.History)
	}
	return wp
}

// whats names the history's entries as the CLI and the timeline do.
func whats(h []apiv1.HistoryEntry) []string {
	out := make([]string, 0, len(h))
	for _, e := range h {
		out = append(out, e.What())
	}
	return out
}

// isSubsequence reports whether want appears in got in order.
func isSubsequence(want, got []string) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	return i == len(want)
}

// checkTimes: entries are in time order, the first at the row's creation,
// none after the row's last write.
func checkTimes(t *testing.T, wp apiv1.WorkPod) {
	t.Helper()
	h := wp.History
	if len(h) == 0 || !h[0].At.Equal(wp.CreatedAt) {
		t.Fatalf("history %+v, want it to begin at the creation %v", h, wp.CreatedAt)
	}
	for i := 1; i < len(h); i++ {
		if h[i].At.Before(h[i-1].At) || h[i].At.After(wp.UpdatedAt) {
			t.Errorf("entry %d at %v: before entry %d at %v, or after the row's last write %v", i, h[i].At, i-1, h[i-1].At, wp.UpdatedAt)
		}
	}
}

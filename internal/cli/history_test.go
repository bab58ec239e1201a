package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/store"
)

// `pods get` of a waiting pod: its row, why it waits and since how long,
// and its history with the wait between entries; a list row names the
// wait as its reason.
func TestPrintPodWaitingAndHistory(t *testing.T) {
	t0 := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	wp := apiv1.WorkPod{
		ID: "turn-a1", Cluster: "wharf", Kind: "turn", State: store.StateDispatched, Submitter: "alice", CreatedAt: t0,
		Waiting: &apiv1.Waiting{Reason: "Unschedulable", Message: "0/2 nodes are available:\n1 Insufficient nvidia.com/gpu.", Since: at(250 * time.Millisecond)},
		History: []apiv1.HistoryEntry{
			{At: t0, Event: store.EventState, State: store.StatePending},
			{At: at(200 * time.Millisecond), Event: store.EventState, State: store.StateDispatched},
			{At: at(250 * time.Millisecond), Event: store.EventWaiting, State: store.StateDispatched, Reason: "Unschedulable", Message: "0/2 nodes are available:\n1 Insufficient nvidia.com/gpu."},
		},
	}
	var out bytes.Buffer
	if err := printPod(&out, "table", wp, at(90*time.Second)); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out.String(), "\n")
	if !strings.HasPrefix(lines[1], "turn-a1") || !strings.HasSuffix(strings.TrimSpace(lines[1]), "waiting: Unschedulable") {
		t.Errorf("row %q, want the wait as its reason", lines[1])
	}
	want := `
waiting 1m30s: Unschedulable: 0/2 nodes are available: 1 Insufficient nvidia.com/gpu.

TIME                      WHAT        DETAIL                                                                  WAIT
2026-03-04T05:06:07.000Z  pending
2026-03-04T05:06:07.200Z  dispatched                                                                          200ms
2026-03-04T05:06:07.250Z  waiting     Unschedulable: 0/2 nodes are available: 1 Insufficient nvidia.com/gpu.  50ms
`
	for i := range lines {
		lines[i] = strings.TrimRight(lines[i], " ")
	}
	if diff := cmp.Diff(want, strings.Join(lines[2:], "\n")); diff != "" {
		t.Errorf("pods get (-want +got):\n%s", diff)
	}
}

// A finished pod: its node and the moments of its start, a state's reason
// as its detail; no wait.
func TestPrintPodFinished(t *testing.T) {
	t0 := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	wp := apiv1.WorkPod{
		ID: "turn-b2", Cluster: "wharf", Kind: "turn", State: store.StateFailed, Reason: "Error: boom", Node: "kwok-node-0", CreatedAt: t0,
		History: []apiv1.HistoryEntry{
			{At: t0.Add(time.Second), Event: store.EventScheduled, State: store.StateDispatched, Message: "kwok-node-0"},
			{At: t0.Add(2 * time.Second), Event: store.EventStarted, State: store.StateDispatched},
			{At: t0.Add(62 * time.Second), Event: store.EventState, State: store.StateFailed, Reason: "Error: boom"},
		},
	}
	var out bytes.Buffer
	if err := printPod(&out, "table", wp, t0); err != nil {
		t.Fatal(err)
	}
	squeezed := strings.Join(strings.Fields(out.String()), " ")
	for _, want := range []string{"node: kwok-node-0 TIME", "2026-03-04T05:06:08.000Z scheduled on kwok-node-0 2026-03-04T05:06:09.000Z started 1s",
		"2026-03-04T05:07:09.000Z failed Error: boom 1m0s"} {
		if !strings.Contains(squeezed, want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "waiting") {
		t.Errorf("a finished pod shown waiting:\n%s", out.String())
	}
	out.Reset()
	if err := printPod(&out, "json", wp, t0); err != nil {
		t.Fatal(err)
	}
	var back apiv1.WorkPod
	if err := json.Unmarshal(out.Bytes(), &back); err != nil || len(back.History) != 3 {
		t.Errorf("-o json: %v, history %+v", err, back.History)
	}
}

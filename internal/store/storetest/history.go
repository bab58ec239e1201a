package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"crucible.dev/crucible/internal/store"
)

// history reads id's history.
func history(t *testing.T, s store.Store, id string) []store.HistoryEntry {
	t.Helper()
	h, err := s.PodHistory(t.Context(), id)
	if err != nil {
		t.Fatalf("history of %s: %v", id, err)
	}
	return h
}

func mustObserve(t *testing.T, s store.Store, id string, o store.Observation) (store.WorkPod, bool) {
	t.Helper()
	p, changed, err := s.ObservePod(t.Context(), id, o)
	if err != nil {
		t.Fatalf("observe %s: %v", id, err)
	}
	return p, changed
}

func waiting(reason, message string) *store.Waiting {
	return &store.Waiting{Reason: reason, Message: message}
}

// testHistoryStates: every state change is an entry, at the time of the
// write that made it, whoever made it (create, transition, update); a
// reason is the change's own; writes that keep the state add nothing.
func testHistoryStates(t *testing.T, s store.Store) {
	mustCreate(t, s, pod("hs"))
	created := mustGet(t, s, "hs")
	dispatched, err := s.TransitionWorkPod(t.Context(), "hs", store.Transition{From: []store.State{store.StatePending}, To: store.StateDispatched, PodUID: "u"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.TransitionWorkPod(t.Context(), "hs", store.Transition{LogCollected: true}); err != nil {
		t.Fatal(err)
	}
	running, err := s.UpdateWorkPod(t.Context(), "hs", func(p *store.WorkPod) error { p.State = store.StateRunning; return nil })
	if err != nil {
		t.Fatal(err)
	}
	failed, err := s.TransitionWorkPod(t.Context(), "hs", store.Transition{From: store.LiveStates, To: store.StateFailed, Reason: "Error: boom", Finish: true})
	if err != nil {
		t.Fatal(err)
	}
	lost, err := s.UpdateWorkPod(t.Context(), "hs", func(p *store.WorkPod) error { p.State = store.StateLost; return nil })
	if err != nil {
		t.Fatal(err)
	}
	want := []store.HistoryEntry{
		{At: created.CreatedAt, Event: store.EventState, State: store.StatePending},
		{At: dispatched.UpdatedAt, Event: store.EventState, State: store.StateDispatched},
		{At: running.UpdatedAt, Event: store.EventState, State: store.StateRunning},
		{At: failed.UpdatedAt, Event: store.EventState, State: store.StateFailed, Reason: "Error: boom"},
		{At: lost.UpdatedAt, Event: store.EventState, State: store.StateLost}, // the reason was failed's
	}
	if diff := cmp.Diff(want, history(t, s, "hs")); diff != "" {
		t.Errorf("history (-want +got):\n%s", diff)
	}
	mustCreate(t, s, pod("hs-failed", func(p *store.WorkPod) { p.State, p.Reason = store.StateFailed, "dispatch: refused" }))
	if got := history(t, s, "hs-failed"); len(got) != 1 || got[0].State != store.StateFailed || got[0].Reason != "dispatch: refused" {
		t.Errorf("a row created failed: history %+v, want its one state with the reason", got)
	}
	if got := history(t, s, "ghost"); len(got) != 0 {
		t.Errorf("history of an unknown pod: %+v, want none", got)
	}
}

// testObservePod: the start moments are entries once each, in order; a
// wait is an entry when its reason changes; the row shows what holds now.
func testObservePod(t *testing.T, s store.Store) {
	mustCreate(t, s, pod("obs", func(p *store.WorkPod) { p.State = store.StateDispatched }))
	unschedulable := "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) had untolerated taint {nvidia.com/gpu: present}."
	steps := []struct {
		name        string
		o           store.Observation
		wantChanged bool
		wantEntry   []store.Event
		wantWaiting *store.Waiting // Since aside
	}{
		{"unschedulable", store.Observation{Waiting: waiting("Unschedulable", unschedulable)}, true, []store.Event{store.EventWaiting}, waiting("Unschedulable", unschedulable)},
		{"the same again", store.Observation{Waiting: waiting("Unschedulable", unschedulable)}, false, nil, waiting("Unschedulable", unschedulable)},
		{"a new message of it", store.Observation{Waiting: waiting("Unschedulable", "0/3 nodes")}, true, nil, waiting("Unschedulable", "0/3 nodes")},
		{"scheduled, pulling", store.Observation{Node: "gpu-0", Moments: []store.Event{store.EventScheduled}, Waiting: waiting("ContainerCreating", "")},
			true, []store.Event{store.EventScheduled, store.EventWaiting}, waiting("ContainerCreating", "")},
		{"back-off", store.Observation{Node: "gpu-0", Moments: []store.Event{store.EventScheduled}, Waiting: waiting("ImagePullBackOff", "Back-off pulling image")},
			true, []store.Event{store.EventWaiting}, waiting("ImagePullBackOff", "Back-off pulling image")},
		{"started without a pulled", store.Observation{Node: "gpu-0", Moments: []store.Event{store.EventScheduled, store.EventStarted}},
			true, []store.Event{store.EventStarted}, nil},
		{"a later pulled is past", store.Observation{Node: "gpu-0", Moments: []store.Event{store.EventScheduled, store.EventPulled, store.EventStarted}},
			false, nil, nil},
	}
	var (
		since      time.Time
		lastReason string
	)
	for _, st := range steps {
		before := history(t, s, "obs")
		got, changed := mustObserve(t, s, "obs", st.o)
		if changed != st.wantChanged {
			t.Errorf("%s: changed %v, want %v", st.name, changed, st.wantChanged)
		}
		if diff := cmp.Diff(withoutSpec(mustGet(t, s, "obs")), got); diff != "" {
			t.Errorf("%s: returned row (-get +returned):\n%s", st.name, diff)
		}
		var events []store.Event
		for _, e := range history(t, s, "obs")[len(before):] {
			events = append(events, e.Event)
			if !e.At.Equal(got.UpdatedAt) || e.State != store.StateDispatched {
				t.Errorf("%s: entry %+v, want it at the write's %v in state dispatched", st.name, e, got.UpdatedAt)
			}
		}
		if diff := cmp.Diff(st.wantEntry, events); diff != "" {
			t.Errorf("%s: entries (-want +got):\n%s", st.name, diff)
		}
		if st.wantWaiting != nil {
			if st.wantWaiting.Reason != lastReason {
				since = got.UpdatedAt // a new reason starts its wait now
			}
			st.wantWaiting.Since, lastReason = since, st.wantWaiting.Reason
		}
		if diff := cmp.Diff(st.wantWaiting, got.Waiting); diff != "" {
			t.Errorf("%s: waiting (-want +got):\n%s", st.name, diff)
		}
	}
	h := history(t, s, "obs")
	if sched := h[2]; sched.Event != store.EventScheduled || sched.Message != "gpu-0" {
		t.Errorf("scheduled entry %+v, want the node as its message", sched)
	}
	if w := h[1]; w.Reason != "Unschedulable" || w.Message != unschedulable {
		t.Errorf("waiting entry %+v, want the scheduler's reason and message", w)
	}
	if got := mustGet(t, s, "obs"); got.Node != "gpu-0" || got.Progress != store.EventStarted {
		t.Errorf("row node %q progress %q, want gpu-0 and started", got.Node, got.Progress)
	}
	testObserveRefused(t, s)
}

// testObserveRefused: a terminal row takes nothing, an unknown row is
// ErrNotFound, a malformed observation an error; none writes.
func testObserveRefused(t *testing.T, s store.Store) {
	mustCreate(t, s, pod("obs-done", func(p *store.WorkPod) { p.State = store.StateSucceeded }))
	if _, changed := mustObserve(t, s, "obs-done", store.Observation{Node: "n", Moments: []store.Event{store.EventScheduled}, Waiting: waiting("X", "")}); changed {
		t.Error("a terminal row took an observation")
	}
	if _, _, err := s.ObservePod(t.Context(), "ghost", store.Observation{}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("observe an unknown row: %v, want ErrNotFound", err)
	}
	for name, o := range map[string]store.Observation{
		"unknown moment":       {Moments: []store.Event{"exploded"}},
		"out of order":         {Moments: []store.Event{store.EventStarted, store.EventScheduled}},
		"a state is no moment": {Moments: []store.Event{store.EventState}},
		"wait without reason":  {Waiting: waiting("", "why?")},
	} {
		if _, _, err := s.ObservePod(t.Context(), "obs-done", o); err == nil || errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s: %v, want a validation error", name, err)
		}
	}
	if got := history(t, s, "obs-done"); len(got) != 1 {
		t.Errorf("refused observations wrote history: %+v", got)
	}
}

// testWaitingCleared: a row that finishes waits for nothing, by
// transition or by update; a live update keeps the wait; an update or a
// create may not write what ObservePod writes.
func testWaitingCleared(t *testing.T, s store.Store) {
	for _, id := range []string{"wc-transition", "wc-update"} {
		mustCreate(t, s, pod(id))
		mustObserve(t, s, id, store.Observation{Waiting: waiting("Unschedulable", "no node")})
	}
	kept, err := s.UpdateWorkPod(t.Context(), "wc-update", func(p *store.WorkPod) error { p.State = store.StateDispatched; return nil })
	if err != nil || kept.Waiting == nil || kept.Waiting.Reason != "Unschedulable" {
		t.Errorf("a live update: waiting %+v, %v; want it kept", kept.Waiting, err)
	}
	tr, err := s.TransitionWorkPod(t.Context(), "wc-transition", store.Transition{From: store.LiveStates, To: store.StateCancelled, Finish: true})
	if err != nil || tr.Waiting != nil {
		t.Errorf("cancelled by transition: waiting %+v, %v; want none", tr.Waiting, err)
	}
	up, err := s.UpdateWorkPod(t.Context(), "wc-update", func(p *store.WorkPod) error { p.State = store.StateFailed; return nil })
	if err != nil || up.Waiting != nil {
		t.Errorf("failed by update: waiting %+v, %v; want none", up.Waiting, err)
	}
	for _, id := range []string{"wc-transition", "wc-update"} {
		if got := mustGet(t, s, id); got.Waiting != nil {
			t.Errorf("%s: stored waiting %+v after it finished", id, got.Waiting)
		}
	}
	mustCreate(t, s, pod("wc-immutable"))
	mustObserve(t, s, "wc-immutable", store.Observation{Waiting: waiting("Unschedulable", "no node")})
	for name, fn := range map[string]func(*store.WorkPod){
		"node":            func(p *store.WorkPod) { p.Node = "n" },
		"progress":        func(p *store.WorkPod) { p.Progress = store.EventStarted },
		"waiting":         func(p *store.WorkPod) { p.Waiting = waiting("X", "") },
		"waiting in situ": func(p *store.WorkPod) { p.Waiting.Reason = "X" },
		"waiting cleared": func(p *store.WorkPod) { p.Waiting = nil },
	} {
		if _, err := s.UpdateWorkPod(t.Context(), "wc-immutable", func(p *store.WorkPod) error { fn(p); return nil }); !errors.Is(err, store.ErrImmutable) {
			t.Errorf("update changing %s: %v, want ErrImmutable", name, err)
		}
	}
	for name, p := range map[string]store.WorkPod{
		"node":     pod("wc-create-node", func(p *store.WorkPod) { p.Node = "n" }),
		"progress": pod("wc-create-progress", func(p *store.WorkPod) { p.Progress = store.EventStarted }),
		"waiting":  pod("wc-create-waiting", func(p *store.WorkPod) { p.Waiting = waiting("X", "") }),
	} {
		if _, err := s.CreateWorkPod(t.Context(), p); err == nil {
			t.Errorf("create with %s: nil error", name)
		}
	}
}

// testHistoryBound: a pod keeps its first entry and the latest
// MaxHistory-1, however often its wait changes.
func testHistoryBound(t *testing.T, s store.Store) {
	mustCreate(t, s, pod("hb"))
	const waits = store.MaxHistory + 50
	for i := range waits {
		mustObserve(t, s, "hb", store.Observation{Waiting: waiting(fmt.Sprintf("Reason%03d", i), "")})
	}
	h := history(t, s, "hb")
	if len(h) != store.MaxHistory {
		t.Fatalf("%d entries, want %d", len(h), store.MaxHistory)
	}
	if h[0].Event != store.EventState || h[0].State != store.StatePending {
		t.Errorf("first entry %+v, want the row's creation", h[0])
	}
	if first, last := h[1].Reason, h[len(h)-1].Reason; first != fmt.Sprintf("Reason%03d", waits-store.MaxHistory+1) || last != fmt.Sprintf("Reason%03d", waits-1) {
		t.Errorf("kept waits %s … %s, want the latest %d", first, last, store.MaxHistory-1)
	}
	if _, err := s.TransitionWorkPod(t.Context(), "hb", store.Transition{To: store.StateCancelled}); err != nil {
		t.Fatal(err)
	}
	if h := history(t, s, "hb"); len(h) != store.MaxHistory || h[len(h)-1].State != store.StateCancelled || h[0].State != store.StatePending {
		t.Errorf("after a state change: %d entries ending %+v, want %d ending cancelled", len(h), h[len(h)-1], store.MaxHistory)
	}
}

// testHistoryConcurrent: observations and state changes racing on one row
// (also from other replicas' connections on PostgreSQL) each get an entry;
// none fails on another's sequence number.
func testHistoryConcurrent(t *testing.T, s store.Store) {
	const workers, each = 4, 10
	mustCreate(t, s, pod("hc"))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				o := store.Observation{Waiting: waiting(fmt.Sprintf("W%d-%d", w, i), "")}
				if _, _, err := s.ObservePod(t.Context(), "hc", o); err != nil {
					t.Errorf("observe: %v", err)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for i := range each {
			to := []store.State{store.StateDispatched, store.StateRunning}[i%2]
			if _, err := s.UpdateWorkPod(t.Context(), "hc", func(p *store.WorkPod) error { p.State = to; return nil }); err != nil {
				t.Errorf("update: %v", err)
				return
			}
		}
	})
	wg.Wait()
	h := history(t, s, "hc")
	if want := 1 + workers*each + each; len(h) != want {
		t.Errorf("%d entries, want %d (the creation, every wait, every state change)", len(h), want)
	}
	for i := 1; i < len(h); i++ {
		if h[i].At.Before(h[i-1].At) {
			t.Errorf("entry %d at %v before entry %d at %v", i, h[i].At, i-1, h[i-1].At)
		}
	}
}

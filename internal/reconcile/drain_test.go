package reconcile

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"crucible.dev/crucible/internal/dispatch"
	"crucible.dev/crucible/internal/retry"
	"crucible.dev/crucible/internal/store"
	"crucible.dev/crucible/internal/store/storetest"
)

// Drain waits for a removed cluster's live rows to end; past the timeout
// it marks the ones still live lost, saying why, and leaves ended rows and
// other clusters' rows alone. A drain whose context ends returns at once.
func TestDrain(t *testing.T) {
	st := storetest.SQLite(t)
	for _, row := range []store.WorkPod{
		{ID: "ends", Cluster: "dock", State: store.StateRunning},
		{ID: "stuck", Cluster: "dock", State: store.StateDispatched},
		{ID: "done", Cluster: "dock", State: store.StateSucceeded},
		{ID: "elsewhere", Cluster: "wharf", State: store.StateRunning},
	} {
		row.Namespace, row.Kind = "loops", "turn"
		if _, err := st.CreateWorkPod(t.Context(), row); err != nil {
			t.Fatal(err)
		}
	}
	r := &Reconciler{Store: st, Log: slog.New(slog.DiscardHandler)}
	state := func(id string) store.WorkPod {
		row, err := st.GetWorkPod(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		return row
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if lost, err := r.Drain(ctx, "dock", time.Hour); !errors.Is(err, context.Canceled) || lost != 0 {
		t.Fatalf("Drain with its context ended: %d, %v", lost, err)
	}

	// "ends" ends while the drain waits; "stuck" does not.
	go func() {
		time.Sleep(100 * time.Millisecond)
		_, _ = st.TransitionWorkPod(context.Background(), "ends", store.Transition{From: store.LiveStates, To: store.StateSucceeded, Finish: true})
	}()
	lost, err := r.Drain(t.Context(), "dock", 3*time.Second)
	if err != nil || lost != 1 {
		t.Fatalf("Drain = %d, %v; want 1 lost", lost, err)
	}
	if got := state("stuck"); got.State != store.StateLost || !strings.Contains(got.Reason, "cluster dock was removed from the profile") || !strings.Contains(got.Reason, "drain timeout (3s)") {
		t.Errorf("stuck: %s %q", got.State, got.Reason)
	}
	for id, want := range map[string]store.State{"ends": store.StateSucceeded, "done": store.StateSucceeded, "elsewhere": store.StateRunning} {
		if got := state(id).State; got != want {
			t.Errorf("%s: %s, want %s", id, got, want)
		}
	}
	// Nothing live is left: the next drain returns at once, losing none.
	if lost, err := r.Drain(t.Context(), "dock", 0); err != nil || lost != 0 {
		t.Errorf("Drain of a drained cluster = %d, %v", lost, err)
	}
}

// The rows a drain marks lost have their pods deleted, each by its uid; a
// row without a pod (never created) has none to delete. A spoke that refuses
// the first delete gets no more: the rows are lost all the same, and the
// drain does not wait out a delete per pod on a spoke that does not answer.
func TestDrainDeletesThePodsItLoses(t *testing.T) {
	for _, refused := range []bool{false, true} {
		t.Run(map[bool]string{false: "deleted", true: "refused"}[refused], func(t *testing.T) {
			st := storetest.SQLite(t)
			rows := []store.WorkPod{
				{ID: "a", Cluster: "dock", State: store.StateRunning, PodUID: "uid-a"},
				{ID: "b", Cluster: "dock", State: store.StateDispatched, PodUID: "uid-b"},
				{ID: "unborn", Cluster: "dock", State: store.StatePending},
			}
			for _, row := range rows {
				row.Namespace, row.Kind = "loops", "turn"
				if _, err := st.CreateWorkPod(t.Context(), row); err != nil {
					t.Fatal(err)
				}
			}
			spoke := newDeleteSpoke(t)
			spoke.refuse(refused)
			r := &Reconciler{Store: st, Log: slog.New(slog.DiscardHandler),
				Dispatcher: &dispatch.Dispatcher{Clients: spoke.clients(t, "dock"), Retry: retry.Policy{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond, Budget: time.Second}}}
			lost, err := r.Drain(t.Context(), "dock", 0)
			if err != nil || lost != 3 {
				t.Fatalf("Drain = %d, %v; want 3 lost", lost, err)
			}
			for _, row := range rows {
				if got, err := st.GetWorkPod(t.Context(), row.ID); err != nil || got.State != store.StateLost {
					t.Errorf("%s: %s, %v; want lost", row.ID, got.State, err)
				}
			}
			got := spoke.deletes()
			slices.Sort(got)
			want := []string{"a uid-a", "b uid-b"}
			if refused {
				if len(got) != 1 || !slices.Contains(want, got[0]) {
					t.Errorf("deletes on a refusing spoke: %q, want one of %q, then none", got, want)
				}
				return
			}
			if !slices.Equal(got, want) {
				t.Errorf("deletes: %q, want %q", got, want)
			}
		})
	}
}

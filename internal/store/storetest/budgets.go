package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"crucible.dev/crucible/internal/store"
)

// testArtifactBudgets: Quota.MaxSubmitterBytes and MaxClusterBytes bound
// the artifacts of every pod of one submitter, and of one cluster, beside
// the total; the refusal is a *FullError (so ErrFull) naming the budget and
// whose it is, records nothing, and leaves other submitters and clusters
// their room.
func testArtifactBudgets(t *testing.T, s store.Store) {
	ctx := t.Context()
	by := func(submitter, cluster string) func(*store.WorkPod) {
		return func(p *store.WorkPod) { p.Submitter, p.Cluster = submitter, cluster }
	}
	mustCreate(t, s, pod("b-ann-1", by("ann", "wharf")), pod("b-ann-2", by("ann", "dock")),
		pod("b-bob-1", by("bob", "wharf")), pod("b-bob-2", by("bob", "dock")))
	q := store.Quota{MaxTotalBytes: 1000, MaxSubmitterBytes: 100, MaxClusterBytes: 150}
	steps := []struct {
		name       string
		in         store.Artifact
		wantBudget store.Budget // "" = recorded
		wantOf     string
	}{
		{"ann's first", art("b-ann-1", "a", 60, "a"), "", ""},
		{"ann's other pod counts towards ann", art("b-ann-2", "a", 41, "a2"), store.BudgetSubmitter, "ann"},
		{"exactly ann's budget", art("b-ann-2", "a", 40, "a2"), "", ""},
		{"ann is full, even for an empty artifact past it", art("b-ann-1", "b", 1, "b"), store.BudgetSubmitter, "ann"},
		{"bob has his own room", art("b-bob-1", "a", 80, "c"), "", ""},
		{"wharf holds 140 of 150", art("b-bob-1", "b", 11, "d"), store.BudgetCluster, "wharf"},
		{"dock has its own room", art("b-bob-2", "a", 20, "e"), "", ""},
	}
	for _, st := range steps {
		created, err := s.PutArtifact(ctx, st.in, q)
		if st.wantBudget == "" {
			if !created || err != nil {
				t.Errorf("%s: created %v, %v; want recorded", st.name, created, err)
			}
			continue
		}
		var fe *store.FullError
		if !errors.As(err, &fe) || !errors.Is(err, store.ErrFull) || fe.Budget != st.wantBudget || fe.Of != st.wantOf {
			t.Errorf("%s: err = %v, want the %s budget of %s full", st.name, err, st.wantBudget, st.wantOf)
		}
		if got, err := s.GetArtifact(ctx, st.in.PodID, st.in.Kind); err == nil && got.SHA256 == st.in.SHA256 {
			t.Errorf("%s: refused claim recorded: %+v", st.name, got)
		}
	}
	// The controller's log, written without a bound, counts all the same.
	if _, err := s.PutArtifact(ctx, fromController(art("b-bob-2", "log", 100, "log")), noQuota); err != nil {
		t.Fatal(err)
	}
	var fe *store.FullError
	if _, err := s.PutArtifact(ctx, art("b-bob-2", "b", 1, "f"), q); !errors.As(err, &fe) || fe.Budget != store.BudgetSubmitter || fe.Of != "bob" {
		t.Errorf("after bob's log: err = %v, want bob's submitter budget full", err)
	}
	for _, c := range []struct {
		pod    string
		budget store.Budget
		of     string
		used   int64
	}{
		{"b-ann-1", store.BudgetSubmitter, "ann", 100},
		{"b-bob-2", store.BudgetSubmitter, "bob", 200},
		{"b-ann-1", store.BudgetCluster, "wharf", 140},
		{"b-bob-2", store.BudgetCluster, "dock", 160},
	} {
		if of, used, err := s.BudgetBytes(ctx, c.pod, c.budget); err != nil || of != c.of || used != c.used {
			t.Errorf("BudgetBytes(%s, %s) = %q, %d, %v; want %q, %d", c.pod, c.budget, of, used, err, c.of, c.used)
		}
	}
	if _, _, err := s.BudgetBytes(ctx, "b-nobody", store.BudgetSubmitter); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("BudgetBytes of an unknown pod: %v, want ErrNotFound", err)
	}
}

// testArtifactBudgetsConcurrent: claims of one submitter's different pods,
// which lock different pod rows, cannot together pass the submitter's
// budget however they interleave (across connections, as replicas are).
func testArtifactBudgetsConcurrent(t *testing.T, s store.Store) {
	const writers, size, fit = 16, 10, 5
	var ids []string
	for i := range writers {
		id := fmt.Sprintf("bud-%02d", i)
		ids = append(ids, id)
		mustCreate(t, s, pod(id, func(p *store.WorkPod) { p.Submitter = "crowd" }))
	}
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for i, id := range ids {
		wg.Go(func() {
			_, errs[i] = s.PutArtifact(t.Context(), art(id, "result", size, id), store.Quota{MaxSubmitterBytes: fit * size})
		})
	}
	wg.Wait()
	ok := 0
	for i, err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, store.ErrFull):
			t.Errorf("%s: %v, want recorded or ErrFull", ids[i], err)
		}
	}
	if ok != fit {
		t.Errorf("%d claims recorded, want %d", ok, fit)
	}
	if got := sumSizes(t, s, ids...); got != fit*size {
		t.Errorf("records hold %d bytes, want %d", got, fit*size)
	}
}

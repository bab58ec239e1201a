package storetest

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"crucible.dev/crucible/internal/store"
)

// testArtifactTotal: Quota.MaxTotalBytes bounds every pod's artifacts
// together, the controller's log among them though the controller sets no
// bound itself; a refused claim records nothing, and ArtifactBytes follows
// every write.
func testArtifactTotal(t *testing.T, s store.Store) {
	ctx := t.Context()
	mustCreate(t, s, pod("t1"), pod("t2"))
	checkTotal(t, s, "empty store", 0)
	total := store.Quota{MaxTotalBytes: 100}
	steps := []struct {
		name        string
		in          store.Artifact
		q           store.Quota
		wantCreated bool
		wantErr     error
		wantTotal   int64
	}{
		{"first", art("t1", "a", 60, "a"), total, true, nil, 60},
		{"a log counts, written without a bound", fromController(art("t2", "log", 30, "log")), noQuota, true, nil, 90},
		{"another pod's upload would pass it", art("t2", "b", 11, "b"), total, false, store.ErrFull, 90},
		{"exactly the total", art("t2", "b", 10, "b"), total, true, nil, 100},
		{"an empty artifact at the total", art("t1", "empty", 0, "empty"), total, true, nil, 100},
		{"one byte past it", art("t1", "c", 1, "c"), total, false, store.ErrFull, 100},
		{"an existing record answers first", art("t1", "a", 60, "a"), total, false, nil, 100},
		{"the pod's quota answers when both are passed", art("t2", "c", 60, "c"), store.Quota{MaxBytes: 50, MaxTotalBytes: 100}, false, store.ErrQuota, 100},
		{"the controller's replacement counts its own size", fromController(art("t1", "a", 20, "a-real")), noQuota, true, nil, 60},
		{"room made by it is room", art("t1", "c", 40, "c"), total, true, nil, 100},
		{"a larger bound is a larger room", art("t2", "d", 50, "d"), store.Quota{MaxTotalBytes: 150}, true, nil, 150},
	}
	for _, st := range steps {
		created, err := s.PutArtifact(ctx, st.in, st.q)
		if created != st.wantCreated {
			t.Errorf("%s: created = %v, want %v", st.name, created, st.wantCreated)
		}
		if st.wantErr == nil && err != nil || st.wantErr != nil && !errors.Is(err, st.wantErr) {
			t.Errorf("%s: err = %v, want %v", st.name, err, st.wantErr)
		}
		if errors.Is(st.wantErr, store.ErrFull) && errors.Is(err, store.ErrQuota) {
			t.Errorf("%s: err = %v is also ErrQuota: the drop-box could not tell a full store from the pod's quota", st.name, err)
		}
		if st.wantErr != nil {
			if got, err := s.GetArtifact(ctx, st.in.PodID, st.in.Kind); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("%s: refused claim recorded: %+v, %v", st.name, got, err)
			}
		}
		checkTotal(t, s, st.name, st.wantTotal)
	}
	checkTotal(t, s, "the records' sizes", sumSizes(t, s, "t1", "t2"))
}

// testArtifactTotalConcurrent: claims of different pods, which lock
// different pod rows, cannot together pass the total however they
// interleave (also across connections, as replicas on PostgreSQL are).
func testArtifactTotalConcurrent(t *testing.T, s store.Store) {
	const writers, size, fit = 16, 10, 5
	var pods []store.WorkPod
	for i := range writers {
		pods = append(pods, pod(fmt.Sprintf("full-%02d", i)))
	}
	mustCreate(t, s, pods...)
	var created, refused atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, p := range pods {
		wg.Go(func() {
			<-start
			ok, err := s.PutArtifact(t.Context(), art(p.ID, "result", size, p.ID), store.Quota{MaxTotalBytes: fit * size})
			switch {
			case errors.Is(err, store.ErrFull):
				refused.Add(1)
			case err != nil:
				t.Errorf("put %s: %v", p.ID, err)
			case ok:
				created.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	if created.Load() != fit || refused.Load() != writers-fit {
		t.Errorf("created %d, refused %d; want %d and %d", created.Load(), refused.Load(), fit, writers-fit)
	}
	var ids []string
	for _, p := range pods {
		ids = append(ids, p.ID)
	}
	if got := sumSizes(t, s, ids...); got != fit*size {
		t.Errorf("records hold %d bytes, want %d", got, fit*size)
	}
	checkTotal(t, s, "after the crowd", fit*size)
}

func checkTotal(t *testing.T, s store.Store, what string, want int64) {
	t.Helper()
	if got, err := s.ArtifactBytes(t.Context()); err != nil || got != want {
		t.Errorf("%s: ArtifactBytes = %d, %v; want %d", what, got, err, want)
	}
}

// sumSizes adds up the recorded sizes of the pods' artifacts.
func sumSizes(t *testing.T, s store.Store, podIDs ...string) int64 {
	t.Helper()
	var sum int64
	for _, id := range podIDs {
		arts, err := s.ListArtifacts(t.Context(), id)
		if err != nil {
			t.Fatalf("list %s: %v", id, err)
		}
		for _, a := range arts {
			sum += a.Size
		}
	}
	return sum
}

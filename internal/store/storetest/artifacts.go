package storetest

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"crucible.dev/crucible/internal/store"
)

// art builds a pod-sourced artifact whose digest is derived from label.
func art(podID, kind string, size int64, label string) store.Artifact {
	return store.Artifact{PodID: podID, Kind: kind, Size: size, SHA256: sha(label), Source: store.SourcePod}
}

func fromController(a store.Artifact) store.Artifact { a.Source = store.SourceController; return a }

var noQuota = store.Quota{}

func testArtifacts(t *testing.T, s store.Store) {
	mustCreate(t, s, pod("p1"), pod("p2"))
	ctx := t.Context()
	log := fromController(art("p1", "log", 1234, "log"))

	before := time.Now()
	created, err := s.PutArtifact(ctx, log, noQuota)
	after := time.Now()
	if err != nil || !created {
		t.Fatalf("first put: created=%v err=%v, want true, nil", created, err)
	}
	got, err := s.GetArtifact(ctx, "p1", "log")
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if diff := cmp.Diff(log, got, cmpopts.IgnoreFields(store.Artifact{}, "CreatedAt")); diff != "" {
		t.Errorf("get (-want +got):\n%s", diff)
	}
	if got.CreatedAt.Before(before) || got.CreatedAt.After(after) || got.CreatedAt.Location() != time.UTC {
		t.Errorf("CreatedAt %v not a UTC time within the put call [%v, %v]", got.CreatedAt, before, after)
	}

	tests := []struct {
		name        string
		in          store.Artifact
		wantCreated bool
		wantErr     error // nil, a sentinel, or errAny
	}{
		{"same again is idempotent", log, false, nil},
		{"same digest, other size field", fromController(art("p1", "log", 1, "log")), false, nil},
		{"different digest conflicts", fromController(art("p1", "log", 1234, "other")), false, store.ErrConflict},
		{"a pod cannot claim the controller's record", art("p1", "log", 1234, "log"), false, store.ErrConflict},
		{"unknown pod", art("ghost", "log", 1, "x"), false, store.ErrNotFound},
		{"same kind on another pod", art("p2", "log", 5, "log2"), true, nil},
		{"another kind", art("p1", "result.json", 0, "empty"), true, nil},
		{"kind sorting before log", art("p1", "diff", 9, "diff"), true, nil},
		{"empty kind", art("p1", "", 1, "e"), false, errAny},
		{"empty digest", store.Artifact{PodID: "p1", Kind: "x", Size: 1, Source: store.SourcePod}, false, errAny},
		{"negative size", art("p1", "y", -1, "y"), false, errAny},
		{"no source", store.Artifact{PodID: "p1", Kind: "z", Size: 1, SHA256: sha("z")}, false, errAny},
		{"unknown source", store.Artifact{PodID: "p1", Kind: "z", Size: 1, SHA256: sha("z"), Source: "spoke"}, false, errAny},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			created, err := s.PutArtifact(ctx, tc.in, noQuota)
			if created != tc.wantCreated {
				t.Errorf("created = %v, want %v", created, tc.wantCreated)
			}
			checkErr(t, err, tc.wantErr)
		})
	}
	// The conflicting puts left the first record as it was.
	if got2, err := s.GetArtifact(ctx, "p1", "log"); err != nil || got2 != got {
		t.Errorf("log after conflict = %+v, %v; want %+v", got2, err, got)
	}
	checkArtifactReads(t, s, got)
}

// checkArtifactReads lists and gets what testArtifacts put: p1's three kinds
// in kind order, log the controller's record, and nothing for other pods.
func checkArtifactReads(t *testing.T, s store.Store, log store.Artifact) {
	t.Helper()
	ctx := t.Context()
	list, err := s.ListArtifacts(ctx, "p1")
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	kinds := []string{}
	for _, a := range list {
		kinds = append(kinds, a.Kind+"/"+string(a.Source))
	}
	if diff := cmp.Diff([]string{"diff/pod", "log/controller", "result.json/pod"}, kinds); diff != "" {
		t.Errorf("kinds (-want +got):\n%s", diff)
	}
	if len(list) > 1 && list[1] != log {
		t.Errorf("listed log = %+v, want %+v", list[1], log)
	}
	for _, id := range []string{"ghost", "p2x"} {
		if list, err := s.ListArtifacts(ctx, id); err != nil || len(list) != 0 || list == nil {
			t.Errorf("list %s = %#v, %v; want empty, nil", id, list, err)
		}
	}
	for _, k := range [][2]string{{"p1", "missing"}, {"ghost", "log"}, {"p2", "diff"}} {
		if _, err := s.GetArtifact(ctx, k[0], k[1]); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("get %s/%s: got %v, want ErrNotFound", k[0], k[1], err)
		}
	}
}

// testArtifactConcurrentPut: several uploads of the same artifact at once
// (retries, several replicas) create it exactly once.
func testArtifactConcurrentPut(t *testing.T, s store.Store) {
	const n = 8
	mustCreate(t, s, pod("race"))
	var creates atomic.Int32
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			created, err := s.PutArtifact(t.Context(), art("race", "log", 3, "race"), noQuota)
			if err != nil {
				t.Errorf("put: %v", err)
			}
			if created {
				creates.Add(1)
			}
		})
	}
	wg.Wait()
	if n := creates.Load(); n != 1 {
		t.Errorf("%d puts reported created, want exactly 1", n)
	}
}

// testArtifactSource: the controller's write of a kind a pod recorded
// (before pods were refused controller-owned kinds) replaces the pod's
// record; nothing replaces the controller's.
func testArtifactSource(t *testing.T, s store.Store) {
	ctx := t.Context()
	mustCreate(t, s, pod("legacy"))
	if _, err := s.PutArtifact(ctx, art("legacy", "log", 6, "forged"), noQuota); err != nil {
		t.Fatal(err)
	}
	real := fromController(art("legacy", "log", 9, "real"))
	created, err := s.PutArtifact(ctx, real, noQuota)
	if err != nil || !created {
		t.Fatalf("controller over pod: created=%v err=%v, want true, nil", created, err)
	}
	got, err := s.GetArtifact(ctx, "legacy", "log")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(real, got, cmpopts.IgnoreFields(store.Artifact{}, "CreatedAt")); diff != "" {
		t.Errorf("after replacement (-want +got):\n%s", diff)
	}
	_, err = s.PutArtifact(ctx, art("legacy", "log", 6, "forged"), noQuota)
	checkErr(t, err, store.ErrConflict)
	_, err = s.PutArtifact(ctx, fromController(art("legacy", "log", 6, "forged")), noQuota)
	checkErr(t, err, store.ErrConflict)
	// Same bytes from a pod first, then the controller: still the
	// controller's claim afterwards.
	if _, err := s.PutArtifact(ctx, art("legacy", "crucible-x", 1, "same"), noQuota); err != nil {
		t.Fatal(err)
	}
	if created, err := s.PutArtifact(ctx, fromController(art("legacy", "crucible-x", 1, "same")), noQuota); err != nil || !created {
		t.Errorf("controller over same pod bytes: created=%v err=%v, want true, nil", created, err)
	}
	if got, _ := s.GetArtifact(ctx, "legacy", "crucible-x"); got.Source != store.SourceController {
		t.Errorf("source = %q, want controller", got.Source)
	}
}

func testArtifactQuota(t *testing.T, s store.Store) {
	ctx := t.Context()
	mustCreate(t, s, pod("q"), pod("other"))
	q := store.Quota{MaxKinds: 2, MaxBytes: 100}
	steps := []struct {
		name        string
		in          store.Artifact
		wantCreated bool
		wantErr     error
	}{
		{"first", art("q", "a", 60, "a"), true, nil},
		{"the controller's artifacts are not the pod's", fromController(art("q", "log", 500, "log")), true, nil},
		{"bytes would pass the limit", art("q", "b", 41, "b"), false, store.ErrQuota},
		{"exactly the byte limit", art("q", "b", 40, "b"), true, nil},
		{"a third kind", art("q", "c", 0, "c"), false, store.ErrQuota},
		{"an existing record answers first (same)", art("q", "a", 60, "a"), false, nil},
		{"an existing record answers first (other)", art("q", "a", 60, "a2"), false, store.ErrConflict},
		{"another pod has its own quota", art("other", "a", 100, "oa"), true, nil},
	}
	for _, st := range steps {
		quota := q
		if st.in.Source == store.SourceController {
			quota = noQuota // as the controller writes
		}
		created, err := s.PutArtifact(ctx, st.in, quota)
		if created != st.wantCreated {
			t.Errorf("%s: created = %v, want %v", st.name, created, st.wantCreated)
		}
		if st.wantErr == nil && err != nil || st.wantErr != nil && !errors.Is(err, st.wantErr) {
			t.Errorf("%s: err = %v, want %v", st.name, err, st.wantErr)
		}
	}
	list, err := s.ListArtifacts(ctx, "q")
	if err != nil || len(list) != 3 {
		t.Errorf("q has %d artifacts (%v), want a, b and log", len(list), err)
	}
	if _, err := s.GetArtifact(ctx, "q", "c"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("refused artifact recorded: %v", err)
	}
}

// testArtifactQuotaConcurrent: writers that each see room cannot together
// pass the quota (the count and the insert are one transaction).
func testArtifactQuotaConcurrent(t *testing.T, s store.Store) {
	const writers, maxKinds = 16, 5
	mustCreate(t, s, pod("crowd"))
	var created, refused atomic.Int32
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			kind := fmt.Sprintf("k%02d", i)
			ok, err := s.PutArtifact(t.Context(), art("crowd", kind, 1, kind), store.Quota{MaxKinds: maxKinds})
			switch {
			case errors.Is(err, store.ErrQuota):
				refused.Add(1)
			case err != nil:
				t.Errorf("put %s: %v", kind, err)
			case ok:
				created.Add(1)
			}
		})
	}
	wg.Wait()
	if created.Load() != maxKinds || refused.Load() != writers-maxKinds {
		t.Errorf("created %d, refused %d; want %d and %d", created.Load(), refused.Load(), maxKinds, writers-maxKinds)
	}
	if list, err := s.ListArtifacts(t.Context(), "crowd"); err != nil || len(list) != maxKinds {
		t.Errorf("recorded %d (%v), want %d", len(list), err, maxKinds)
	}
}

// Package storetest is the conformance suite every store.Store backend must
// pass. It is run against SQLite and against a real PostgreSQL in the same
// `go test` run (R-C2), so that what the controller relies on — conflicts,
// atomic read-modify-write, ordering, exact time round-trips — does not
// silently differ between a single-replica and an HA deployment.
//
// It also holds the store every other package's tests use: SQLite, the real
// store in a temporary directory, and Faulty, which fails chosen calls of
// it. Like any package that imports testing, only _test files import it.
package storetest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"crucible.dev/crucible/internal/store"
)

// Run runs the suite. open must return a new, empty, migrated store for each
// call; Run closes it.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"CreateGet", testCreateGet},
		{"CreateConflict", testCreateConflict},
		{"CreateInvalid", testCreateInvalid},
		{"GetNotFound", testGetNotFound},
		{"GetMany", testGetMany},
		{"List", testList},
		{"ListNegativeLimit", testListNegativeLimit},
		{"ListPages", testListPages},
		{"ListWithoutSpec", testListWithoutSpec},
		{"CountLive", testCountLive},
		{"Submitter", testSubmitter},
		{"IdempotencyKey", testIdempotencyKey},
		{"IdempotencyKeyScope", testIdempotencyKeyScope},
		{"IdempotencyKeyConcurrent", testIdempotencyKeyConcurrent},
		{"Update", testUpdate},
		{"UpdateNotFound", testUpdateNotFound},
		{"UpdateFnErrorAborts", testUpdateFnErrorAborts},
		{"UpdateImmutable", testUpdateImmutable},
		{"UpdateConcurrent", testUpdateConcurrent},
		{"Transition", testTransition},
		{"TransitionRefused", testTransitionRefused},
		{"TransitionConcurrent", testTransitionConcurrent},
		{"CancelledContext", testCancelledContext},
		{"TimeRoundTrip", testTimeRoundTrip},
		{"SpecBytes", testSpecBytes},
		{"Artifacts", testArtifacts},
		{"ArtifactConcurrentPut", testArtifactConcurrentPut},
		{"ArtifactSource", testArtifactSource},
		{"ArtifactQuota", testArtifactQuota},
		{"ArtifactQuotaConcurrent", testArtifactQuotaConcurrent},
		{"ArtifactTotal", testArtifactTotal},
		{"ArtifactTotalConcurrent", testArtifactTotalConcurrent},
		{"ArtifactBudgets", testArtifactBudgets},
		{"ArtifactBudgetsConcurrent", testArtifactBudgetsConcurrent},
		{"HostileInput", testHostileInput},
		{"HistoryStates", testHistoryStates},
		{"ObservePod", testObservePod},
		{"WaitingCleared", testWaitingCleared},
		{"HistoryBound", testHistoryBound},
		{"HistoryConcurrent", testHistoryConcurrent},
		{"Move", testMove},
		{"MoveRefused", testMoveRefused},
		{"MoveFenced", testMoveFenced},
		{"MoveConcurrent", testMoveConcurrent},
		{"ListPlacedSince", testListPlacedSince},
		{"MirrorDocuments", testMirrorDocuments},
		{"FenceNewer", testFenceNewer},
		{"FenceClaim", testFenceClaim},
		{"FenceScope", testFenceScope},
		{"FenceInvalid", testFenceInvalid},
		{"FenceConcurrent", testFenceConcurrent},
		{"DigestKey", testDigestKey},
		{"DigestKeyConcurrent", testDigestKeyConcurrent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := open(t)
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("close: %v", err)
				}
			})
			tc.fn(t, s)
		})
	}
}

// pod builds a valid pending work pod; mods adjust it.
func pod(id string, mods ...func(*store.WorkPod)) store.WorkPod {
	p := store.WorkPod{
		ID:        id,
		Cluster:   "wharf",
		Namespace: "crucible",
		Kind:      "turn",
		State:     store.StatePending,
		Spec:      []byte(`{"prompt":"hello"}`),
	}
	for _, m := range mods {
		m(&p)
	}
	return p
}

func ptr[T any](v T) *T { return &v }

// ignoreStoreTimes leaves out the times the store sets, for comparing a
// stored pod with the one that was submitted.
var ignoreStoreTimes = cmpopts.IgnoreFields(store.WorkPod{}, "CreatedAt", "UpdatedAt")

func mustCreate(t *testing.T, s store.Store, pods ...store.WorkPod) {
	t.Helper()
	for _, p := range pods {
		if _, err := s.CreateWorkPod(t.Context(), p); err != nil {
			t.Fatalf("create %s: %v", p.ID, err)
		}
	}
}

func mustGet(t *testing.T, s store.Store, id string) store.WorkPod {
	t.Helper()
	p, err := s.GetWorkPod(t.Context(), id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return p
}

func testCreateGet(t *testing.T, s store.Store) {
	tests := []struct {
		name string
		in   store.WorkPod
		want store.WorkPod // as read back, store times aside
	}{
		{name: "minimal", in: pod("minimal"), want: pod("minimal")},
		{
			name: "every field",
			in: pod("full", func(p *store.WorkPod) {
				p.Cluster, p.Kind, p.State = "dock", "loop", store.StateFailed
				p.PodUID = "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"
				p.ExitCode = ptr(int32(-137))
				p.Reason = "OOMKilled"
				p.LogCollected = true
				p.FinishedAt = ptr(time.Date(2031, 2, 3, 4, 5, 6, 789012345, time.UTC))
				p.Placement = &store.Placement{Decision: "wharf: 1 of 4 nvidia.com/gpu free (needs 2); dock: fits (16 nvidia.com/gpu free)", Waits: true}
				p.Submitter, p.IdempotencyKey, p.RequestSHA256 = "alice", "k-full", strings.Repeat("ab", 32)
			}),
			want: pod("full", func(p *store.WorkPod) {
				p.Cluster, p.Kind, p.State = "dock", "loop", store.StateFailed
				p.PodUID = "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"
				p.ExitCode = ptr(int32(-137))
				p.Reason = "OOMKilled"
				p.LogCollected = true
				p.FinishedAt = ptr(time.Date(2031, 2, 3, 4, 5, 6, 789012345, time.UTC))
				p.Placement = &store.Placement{Decision: "wharf: 1 of 4 nvidia.com/gpu free (needs 2); dock: fits (16 nvidia.com/gpu free)", Waits: true}
				p.Submitter, p.IdempotencyKey, p.RequestSHA256 = "alice", "k-full", strings.Repeat("ab", 32)
			}),
		},
		{name: "exit code zero", in: pod("zero", func(p *store.WorkPod) { p.ExitCode = ptr(int32(0)) }),
			want: pod("zero", func(p *store.WorkPod) { p.ExitCode = ptr(int32(0)) })},
		{name: "no spec", in: pod("nospec", func(p *store.WorkPod) { p.Spec = nil }),
			want: pod("nospec", func(p *store.WorkPod) { p.Spec = nil })},
		{name: "empty spec reads back nil", in: pod("emptyspec", func(p *store.WorkPod) { p.Spec = []byte{} }),
			want: pod("emptyspec", func(p *store.WorkPod) { p.Spec = nil })},
		{name: "caller times ignored", in: pod("times", func(p *store.WorkPod) {
			p.CreatedAt = time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
			p.UpdatedAt = p.CreatedAt
		}), want: pod("times")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := time.Now()
			created, err := s.CreateWorkPod(t.Context(), tc.in)
			if err != nil {
				t.Fatalf("create: %v", err)
			}
			after := time.Now()
			got := mustGet(t, s, tc.in.ID)
			if diff := cmp.Diff(tc.want, got, ignoreStoreTimes); diff != "" {
				t.Errorf("get (-want +got):\n%s", diff)
			}
			// The row a create returns is the one a read finds, times and all:
			// its caller publishes it without reading it back.
			if diff := cmp.Diff(got, created); diff != "" {
				t.Errorf("create returned (-read back +returned):\n%s", diff)
			}
			if got.CreatedAt.Before(before) || got.CreatedAt.After(after) {
				t.Errorf("CreatedAt %v not within the create call [%v, %v]", got.CreatedAt, before, after)
			}
			if !got.UpdatedAt.Equal(got.CreatedAt) {
				t.Errorf("UpdatedAt %v != CreatedAt %v on a new row", got.UpdatedAt, got.CreatedAt)
			}
			if got.CreatedAt.Location() != time.UTC || got.UpdatedAt.Location() != time.UTC {
				t.Errorf("times not UTC: %v, %v", got.CreatedAt.Location(), got.UpdatedAt.Location())
			}
		})
	}
}

func testCreateConflict(t *testing.T, s store.Store) {
	first := pod("dup")
	mustCreate(t, s, first)
	stored := mustGet(t, s, "dup")

	second := pod("dup", func(p *store.WorkPod) { p.Cluster, p.Reason = "other", "second" })
	_, err := s.CreateWorkPod(t.Context(), second)
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second create: got %v, want ErrConflict", err)
	}
	if diff := cmp.Diff(stored, mustGet(t, s, "dup")); diff != "" {
		t.Errorf("row changed by the refused create (-want +got):\n%s", diff)
	}
}

func testCreateInvalid(t *testing.T, s store.Store) {
	tests := []struct {
		name string
		in   store.WorkPod
	}{
		{"empty id", pod("")},
		{"empty cluster", pod("nocluster", func(p *store.WorkPod) { p.Cluster = "" })},
		{"empty state", pod("nostate", func(p *store.WorkPod) { p.State = "" })},
		{"unknown state", pod("badstate", func(p *store.WorkPod) { p.State = "exploded" })},
		{"finished before the int64 epoch range", pod("ancient", func(p *store.WorkPod) { p.FinishedAt = ptr(time.Time{}) })},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.CreateWorkPod(t.Context(), tc.in)
			if err == nil {
				t.Fatal("create: got nil error")
			}
			if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
				t.Errorf("create: %v wraps a sentinel it should not", err)
			}
			if tc.in.ID != "" {
				if _, err := s.GetWorkPod(t.Context(), tc.in.ID); !errors.Is(err, store.ErrNotFound) {
					t.Errorf("get after refused create: got %v, want ErrNotFound", err)
				}
			}
		})
	}
}

func testGetNotFound(t *testing.T, s store.Store) {
	mustCreate(t, s, pod("present"))
	for _, id := range []string{"absent", "PRESENT", "present ", ""} {
		_, err := s.GetWorkPod(t.Context(), id)
		if !errors.Is(err, store.ErrNotFound) {
			t.Errorf("get %q: got %v, want ErrNotFound", id, err)
		}
	}
}

func testList(t *testing.T, s store.Store) {
	// Created in this order, so newest first is the reverse.
	mustCreate(t, s,
		pod("a", func(p *store.WorkPod) { p.Cluster, p.Kind, p.State = "wharf", "loop", store.StateRunning }),
		pod("b", func(p *store.WorkPod) { p.Cluster, p.Kind, p.State = "dock", "turn", store.StatePending }),
		pod("c", func(p *store.WorkPod) { p.Cluster, p.Kind, p.State = "wharf", "turn", store.StateSucceeded }),
		pod("d", func(p *store.WorkPod) { p.Cluster, p.Kind, p.State = "wharf", "turn", store.StateRunning }),
		pod("e", func(p *store.WorkPod) { p.Cluster, p.Kind, p.State = "dock", "loop", store.StateLost }),
		pod("f", func(p *store.WorkPod) { p.Cluster, p.Kind, p.State = "wharf", "loop", store.StateDispatched }),
	)
	live := []store.State{store.StatePending, store.StateDispatched, store.StateRunning}
	tests := []struct {
		name string
		f    store.Filter
		want []string
	}{
		{"all", store.Filter{}, []string{"f", "e", "d", "c", "b", "a"}},
		{"cluster", store.Filter{Cluster: "wharf"}, []string{"f", "d", "c", "a"}},
		{"kind", store.Filter{Kind: "loop"}, []string{"f", "e", "a"}},
		{"one state", store.Filter{States: []store.State{store.StateRunning}}, []string{"d", "a"}},
		{"live states", store.Filter{States: live}, []string{"f", "d", "b", "a"}},
		{"cluster and states", store.Filter{Cluster: "wharf", States: live}, []string{"f", "d", "a"}},
		{"cluster, kind and states", store.Filter{Cluster: "wharf", Kind: "turn", States: live}, []string{"d"}},
		{"limit", store.Filter{Limit: 2}, []string{"f", "e"}},
		{"limit above count", store.Filter{Cluster: "dock", Limit: 10}, []string{"e", "b"}},
		{"filter and limit", store.Filter{States: live, Limit: 3}, []string{"f", "d", "b"}},
		{"no match", store.Filter{Cluster: "nowhere"}, []string{}},
		{"state with no rows", store.Filter{States: []store.State{store.StateCancelled}}, []string{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.ListWorkPods(t.Context(), tc.f)
			if err != nil {
				t.Fatalf("list: %v", err)
			}
			ids := []string{}
			for _, p := range got {
				ids = append(ids, p.ID)
			}
			if diff := cmp.Diff(tc.want, ids); diff != "" {
				t.Errorf("ids (-want +got):\n%s", diff)
			}
		})
	}
	// Listed rows are whole rows, the same as Get returns.
	all, err := s.ListWorkPods(t.Context(), store.Filter{Kind: "loop", Cluster: "dock"})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if diff := cmp.Diff([]store.WorkPod{mustGet(t, s, "e")}, all); diff != "" {
		t.Errorf("listed row differs from get (-want +got):\n%s", diff)
	}
}

func testListNegativeLimit(t *testing.T, s store.Store) {
	if _, err := s.ListWorkPods(t.Context(), store.Filter{Limit: -1}); err == nil {
		t.Error("list with limit -1: got nil error")
	}
}

func testUpdate(t *testing.T, s store.Store) {
	mustCreate(t, s, pod("u"))
	created := mustGet(t, s, "u")
	finished := time.Date(2030, 6, 7, 8, 9, 10, 111222333, time.FixedZone("CEST", 2*3600))

	got, err := s.UpdateWorkPod(t.Context(), "u", func(p *store.WorkPod) error {
		p.State = store.StateSucceeded
		p.PodUID = "uid-1"
		p.ExitCode = ptr(int32(0))
		p.Reason = "Completed"
		p.LogCollected = true
		p.FinishedAt = &finished
		p.Spec = []byte(`{"prompt":"changed"}`)
		p.Namespace, p.Kind = "other-ns", "loop"
		p.UpdatedAt = time.Date(1999, 1, 1, 0, 0, 0, 0, time.UTC) // the store sets it
		return nil
	})
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	want := pod("u", func(p *store.WorkPod) {
		p.State, p.PodUID, p.ExitCode, p.Reason, p.LogCollected = store.StateSucceeded, "uid-1", ptr(int32(0)), "Completed", true
		p.FinishedAt = ptr(finished.UTC())
		p.Spec = []byte(`{"prompt":"changed"}`)
		p.Namespace, p.Kind = "other-ns", "loop"
		p.CreatedAt = created.CreatedAt
	})
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(store.WorkPod{}, "UpdatedAt")); diff != "" {
		t.Errorf("returned (-want +got):\n%s", diff)
	}
	if !got.UpdatedAt.After(created.UpdatedAt) {
		t.Errorf("UpdatedAt %v not after the previous %v", got.UpdatedAt, created.UpdatedAt)
	}
	if got.FinishedAt.Location() != time.UTC {
		t.Errorf("returned FinishedAt in %v, want UTC", got.FinishedAt.Location())
	}
	if diff := cmp.Diff(got, mustGet(t, s, "u")); diff != "" {
		t.Errorf("get after update differs from what update returned (-returned +get):\n%s", diff)
	}

	// Clearing optional fields clears them.
	got, err = s.UpdateWorkPod(t.Context(), "u", func(p *store.WorkPod) error {
		p.ExitCode, p.FinishedAt, p.Spec, p.LogCollected = nil, nil, nil, false
		return nil
	})
	if err != nil {
		t.Fatalf("second update: %v", err)
	}
	if got.ExitCode != nil || got.FinishedAt != nil || got.Spec != nil || got.LogCollected {
		t.Errorf("optional fields not cleared: %+v", got)
	}
	if diff := cmp.Diff(got, mustGet(t, s, "u")); diff != "" {
		t.Errorf("get after second update (-returned +get):\n%s", diff)
	}
}

func testUpdateNotFound(t *testing.T, s store.Store) {
	called := false
	_, err := s.UpdateWorkPod(t.Context(), "ghost", func(*store.WorkPod) error { called = true; return nil })
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("update: got %v, want ErrNotFound", err)
	}
	if called {
		t.Error("fn was called for a missing row")
	}
}

var errBoom = errors.New("boom")

func testUpdateFnErrorAborts(t *testing.T, s store.Store) {
	mustCreate(t, s, pod("abort"))
	before := mustGet(t, s, "abort")
	got, err := s.UpdateWorkPod(t.Context(), "abort", func(p *store.WorkPod) error {
		p.State, p.Reason = store.StateFailed, "should not stick"
		return fmt.Errorf("decide: %w", errBoom)
	})
	if !errors.Is(err, errBoom) {
		t.Fatalf("update: got %v, want an error wrapping errBoom", err)
	}
	if diff := cmp.Diff(store.WorkPod{}, got); diff != "" {
		t.Errorf("returned a pod with the error (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(before, mustGet(t, s, "abort")); diff != "" {
		t.Errorf("row changed by an aborted update (-want +got):\n%s", diff)
	}
	// The store is still usable: the aborted transaction released its lock.
	if _, err := s.UpdateWorkPod(t.Context(), "abort", func(p *store.WorkPod) error { p.Reason = "ok"; return nil }); err != nil {
		t.Errorf("update after abort: %v", err)
	}
}

func testUpdateImmutable(t *testing.T, s store.Store) {
	mustCreate(t, s, pod("imm"))
	before := mustGet(t, s, "imm")
	tests := []struct {
		name string
		fn   func(*store.WorkPod)
	}{
		{"id", func(p *store.WorkPod) { p.ID = "other" }},
		{"cluster", func(p *store.WorkPod) { p.Cluster = "dock" }},
		{"created at", func(p *store.WorkPod) { p.CreatedAt = p.CreatedAt.Add(time.Second) }},
		{"submitter", func(p *store.WorkPod) { p.Submitter = "mallory" }},
		{"idempotency key", func(p *store.WorkPod) { p.IdempotencyKey = "k1" }},
		{"request sha256", func(p *store.WorkPod) { p.RequestSHA256 = "00" }},
		{"placement", func(p *store.WorkPod) { p.Placement = &store.Placement{Decision: "dock: fits"} }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.UpdateWorkPod(t.Context(), "imm", func(p *store.WorkPod) error {
				tc.fn(p)
				p.Reason = "should not stick"
				return nil
			})
			if !errors.Is(err, store.ErrImmutable) {
				t.Fatalf("update: got %v, want ErrImmutable", err)
			}
			if diff := cmp.Diff(before, mustGet(t, s, "imm")); diff != "" {
				t.Errorf("row changed (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := s.GetWorkPod(t.Context(), "other"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("get other: got %v, want ErrNotFound", err)
	}
}

// testUpdateConcurrent runs 16 goroutines each appending its own tokens to
// one row. fn sleeps between its read and the write, which makes an update
// that is not isolated lose another's append almost surely.
func testUpdateConcurrent(t *testing.T, s store.Store) {
	const workers, each = 16, 4
	mustCreate(t, s, pod("hot"))
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				_, err := s.UpdateWorkPod(t.Context(), "hot", func(p *store.WorkPod) error {
					seen := p.Reason
					time.Sleep(time.Millisecond)
					p.Reason = seen + fmt.Sprintf("w%02d.%d;", w, i)
					return nil
				})
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("update: %v", err)
	}
	got := strings.Split(strings.TrimSuffix(mustGet(t, s, "hot").Reason, ";"), ";")
	want := []string{}
	for w := range workers {
		for i := range each {
			want = append(want, fmt.Sprintf("w%02d.%d", w, i))
		}
	}
	if diff := cmp.Diff(want, got, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("appended tokens (-want +got), lost or doubled updates:\n%s", diff)
	}
}

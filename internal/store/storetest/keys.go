package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"crucible.dev/crucible/internal/store"
)

// keyed makes a pod submitted by submitter with idempotency key key.
func keyed(submitter, key, digest string) func(*store.WorkPod) {
	return func(p *store.WorkPod) { p.Submitter, p.IdempotencyKey, p.RequestSHA256 = submitter, key, digest }
}

// testIdempotencyKey: the key and the request digest are stored at create
// and read back by get, list and GetWorkPodByKey; a second row with a taken
// key is ErrKeyTaken (not ErrConflict) and writes nothing; a taken id is
// still ErrConflict; rows without a key never collide.
func testIdempotencyKey(t *testing.T, s store.Store) {
	const key = `k-1 "quoted" ; DROP TABLE work_pods; --`
	first := pod("first", keyed("alice", key, "aaaa"))
	mustCreate(t, s, first, pod("nokey-1", keyed("alice", "", "")), pod("nokey-2", keyed("alice", "", "")))

	got := mustGet(t, s, "first")
	if got.IdempotencyKey != key || got.RequestSHA256 != "aaaa" {
		t.Errorf("get: key %q digest %q, want %q aaaa", got.IdempotencyKey, got.RequestSHA256, key)
	}
	byKey, err := s.GetWorkPodByKey(t.Context(), "alice", key)
	if err != nil {
		t.Fatalf("get by key: %v", err)
	}
	if diff := cmp.Diff(got, byKey); diff != "" {
		t.Errorf("get by key differs from get (-get +by key):\n%s", diff)
	}
	listed, err := s.ListWorkPods(t.Context(), store.Filter{WithoutSpec: true})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	for _, p := range listed {
		if p.ID == "first" && (p.IdempotencyKey != key || p.RequestSHA256 != "aaaa") {
			t.Errorf("list: key %q digest %q", p.IdempotencyKey, p.RequestSHA256)
		}
	}

	_, err = s.CreateWorkPod(t.Context(), pod("second", keyed("alice", key, "bbbb")))
	if !errors.Is(err, store.ErrKeyTaken) || errors.Is(err, store.ErrConflict) {
		t.Fatalf("create with a taken key: got %v, want ErrKeyTaken only", err)
	}
	if store.IsUnavailable(err) {
		t.Errorf("ErrKeyTaken classified as unavailable: %v", err)
	}
	if _, err := s.GetWorkPod(t.Context(), "second"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("get second: got %v, want ErrNotFound (nothing written)", err)
	}
	_, err = s.CreateWorkPod(t.Context(), pod("first", keyed("alice", "another", "cccc")))
	if !errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrKeyTaken) {
		t.Errorf("create with a taken id: got %v, want ErrConflict only", err)
	}
	if _, err := s.GetWorkPodByKey(t.Context(), "alice", "another"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("get by key of the refused row: got %v, want ErrNotFound", err)
	}
	if _, err := s.GetWorkPodByKey(t.Context(), "alice", ""); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("get by empty key: got %v, want ErrNotFound", err)
	}

	updated, err := s.UpdateWorkPod(t.Context(), "first", func(p *store.WorkPod) error {
		p.State = store.StateDispatched
		return nil
	})
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	if updated.IdempotencyKey != key || updated.RequestSHA256 != "aaaa" {
		t.Errorf("update lost the key: %q %q", updated.IdempotencyKey, updated.RequestSHA256)
	}
	if got, _ := s.GetWorkPodByKey(t.Context(), "alice", key); got.State != store.StateDispatched {
		t.Errorf("get by key after update: state %q, want dispatched", got.State)
	}
}

// testIdempotencyKeyScope: a key is its submitter's own — the same key
// makes one row per submitter, and one submitter never finds another's row
// by its key. Keys compare bytewise (no case folding).
func testIdempotencyKeyScope(t *testing.T, s store.Store) {
	mustCreate(t, s, pod("alices", keyed("alice", "shared", "a")), pod("bobs", keyed("bob", "shared", "b")),
		pod("bobs-upper", keyed("bob", "SHARED", "c")))
	for _, tc := range []struct{ submitter, key, want string }{
		{"alice", "shared", "alices"}, {"bob", "shared", "bobs"}, {"bob", "SHARED", "bobs-upper"},
	} {
		got, err := s.GetWorkPodByKey(t.Context(), tc.submitter, tc.key)
		if err != nil || got.ID != tc.want {
			t.Errorf("get by key (%s, %s): %s, %v; want %s", tc.submitter, tc.key, got.ID, err, tc.want)
		}
	}
	for _, tc := range []struct{ submitter, key string }{{"carol", "shared"}, {"alice", "SHARED"}, {"", "shared"}} {
		if got, err := s.GetWorkPodByKey(t.Context(), tc.submitter, tc.key); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("get by key (%q, %q): %s, %v; want ErrNotFound", tc.submitter, tc.key, got.ID, err)
		}
	}
}

// testIdempotencyKeyConcurrent: 16 writers (think: replicas answering
// retries of one submit) race to create rows of different ids with one key;
// exactly one row is created and every other writer gets ErrKeyTaken.
func testIdempotencyKeyConcurrent(t *testing.T, s store.Store) {
	const writers = 16
	errs := make([]error, writers)
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			_, errs[i] = s.CreateWorkPod(t.Context(), pod(fmt.Sprintf("race-%02d", i), keyed("alice", "race", "d")))
		})
	}
	wg.Wait()
	created := 0
	for i, err := range errs {
		switch {
		case err == nil:
			created++
		case !errors.Is(err, store.ErrKeyTaken):
			t.Errorf("writer %d: %v, want nil or ErrKeyTaken", i, err)
		}
	}
	rows, err := s.ListWorkPods(t.Context(), store.Filter{})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if created != 1 || len(rows) != 1 {
		t.Fatalf("%d creates succeeded, %d rows; want 1 and 1", created, len(rows))
	}
	if got, err := s.GetWorkPodByKey(t.Context(), "alice", "race"); err != nil || got.ID != rows[0].ID {
		t.Errorf("get by key: %s, %v; want %s", got.ID, err, rows[0].ID)
	}
}

package storetest

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"crucible.dev/crucible/internal/store"
)

// SQLite returns a new, migrated SQLite store in tb's temporary directory,
// closed when tb ends. Tests of the packages that use a store run on the
// real one, so ordering, cursors, sentinels and transitions are the
// store's own and not a copy that could drift from it.
func SQLite(tb testing.TB) store.Store {
	tb.Helper()
	s, err := store.Open(tb.Context(), "sqlite:"+filepath.Join(tb.TempDir(), "crucible.db"))
	if err != nil {
		tb.Fatalf("open SQLite store: %v", err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("close SQLite store: %v", err)
		}
	})
	return s
}

// calls are the Store methods Faulty can fail: all but Close, which always
// reaches the store so that a test's cleanup closes it.
var calls = []string{"CreateWorkPod", "GetWorkPodByKey", "GetWorkPod", "GetWorkPods", "ListWorkPods",
	"CountLive", "UpdateWorkPod", "TransitionWorkPod", "PutArtifact", "ArtifactBytes", "BudgetBytes", "GetArtifact", "ListArtifacts", "ObservePod", "MoveWorkPod", "KeepMirrorDocument", "MirrorDocument", "PodHistory", "ClaimEpoch", "DigestKey"}

// Faulty is a store whose chosen calls fail, for testing what a caller does
// when the database cannot serve it (a store that is down, one call that
// fails midway). Until Fail is called every call reaches Store.
type Faulty struct {
	store.Store

	mu     sync.Mutex
	err    error
	failed []string // the calls that return err; none: every call
}

var _ store.Store = (*Faulty)(nil)

// Fail makes the named calls (Store method names; every call but Close when
// none is named) return err from now on without reaching Store. Fail(nil)
// heals the store. A name that is no Store method panics, so that a
// misspelt fault cannot leave a test passing without its fault.
func (f *Faulty) Fail(err error, call ...string) {
	for _, c := range call {
		if !slices.Contains(calls, c) {
			panic(fmt.Sprintf("storetest: Faulty.Fail: %q is not a Store call that can fail (%v)", c, calls))
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err, f.failed = err, slices.Clone(call)
}

// fault is what call returns instead of reaching Store, nil to reach it.
func (f *Faulty) fault(call string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.failed) > 0 && !slices.Contains(f.failed, call) {
		return nil
	}
	return f.err
}

func (f *Faulty) CreateWorkPod(ctx context.Context, p store.WorkPod) (store.WorkPod, error) {
	if err := f.fault("CreateWorkPod"); err != nil {
		return store.WorkPod{}, err
	}
	return f.Store.CreateWorkPod(ctx, p)
}

func (f *Faulty) GetWorkPodByKey(ctx context.Context, submitter, key string) (store.WorkPod, error) {
	if err := f.fault("GetWorkPodByKey"); err != nil {
		return store.WorkPod{}, err
	}
	return f.Store.GetWorkPodByKey(ctx, submitter, key)
}

func (f *Faulty) GetWorkPod(ctx context.Context, id string) (store.WorkPod, error) {
	if err := f.fault("GetWorkPod"); err != nil {
		return store.WorkPod{}, err
	}
	return f.Store.GetWorkPod(ctx, id)
}

func (f *Faulty) GetWorkPods(ctx context.Context, ids []string) (map[string]store.WorkPod, error) {
	if err := f.fault("GetWorkPods"); err != nil {
		return nil, err
	}
	return f.Store.GetWorkPods(ctx, ids)
}

func (f *Faulty) ListWorkPods(ctx context.Context, flt store.Filter) ([]store.WorkPod, error) {
	if err := f.fault("ListWorkPods"); err != nil {
		return nil, err
	}
	return f.Store.ListWorkPods(ctx, flt)
}

func (f *Faulty) UpdateWorkPod(ctx context.Context, id string, fn func(*store.WorkPod) error) (store.WorkPod, error) {
	if err := f.fault("UpdateWorkPod"); err != nil {
		return store.WorkPod{}, err
	}
	return f.Store.UpdateWorkPod(ctx, id, fn)
}

func (f *Faulty) TransitionWorkPod(ctx context.Context, id string, t store.Transition) (store.WorkPod, error) {
	if err := f.fault("TransitionWorkPod"); err != nil {
		return store.WorkPod{}, err
	}
	return f.Store.TransitionWorkPod(ctx, id, t)
}

func (f *Faulty) PutArtifact(ctx context.Context, a store.Artifact, q store.Quota) (bool, error) {
	if err := f.fault("PutArtifact"); err != nil {
		return false, err
	}
	return f.Store.PutArtifact(ctx, a, q)
}

func (f *Faulty) CountLive(ctx context.Context) (map[string]store.LiveCounts, error) {
	if err := f.fault("CountLive"); err != nil {
		return nil, err
	}
	return f.Store.CountLive(ctx)
}

func (f *Faulty) ArtifactBytes(ctx context.Context) (int64, error) {
	if err := f.fault("ArtifactBytes"); err != nil {
		return 0, err
	}
	return f.Store.ArtifactBytes(ctx)
}

func (f *Faulty) BudgetBytes(ctx context.Context, podID string, b store.Budget) (string, int64, error) {
	if err := f.fault("BudgetBytes"); err != nil {
		return "", 0, err
	}
	return f.Store.BudgetBytes(ctx, podID, b)
}

func (f *Faulty) GetArtifact(ctx context.Context, podID, kind string) (store.Artifact, error) {
	if err := f.fault("GetArtifact"); err != nil {
		return store.Artifact{}, err
	}
	return f.Store.GetArtifact(ctx, podID, kind)
}

func (f *Faulty) ListArtifacts(ctx context.Context, podID string) ([]store.Artifact, error) {
	if err := f.fault("ListArtifacts"); err != nil {
		return nil, err
	}
	return f.Store.ListArtifacts(ctx, podID)
}

func (f *Faulty) MoveWorkPod(ctx context.Context, id string, m store.Move) (store.WorkPod, error) {
	if err := f.fault("MoveWorkPod"); err != nil {
		return store.WorkPod{}, err
	}
	return f.Store.MoveWorkPod(ctx, id, m)
}

func (f *Faulty) KeepMirrorDocument(ctx context.Context, name string, body []byte, fetchedAt time.Time) error {
	if err := f.fault("KeepMirrorDocument"); err != nil {
		return err
	}
	return f.Store.KeepMirrorDocument(ctx, name, body, fetchedAt)
}

func (f *Faulty) MirrorDocument(ctx context.Context, name string) ([]byte, time.Time, error) {
	if err := f.fault("MirrorDocument"); err != nil {
		return nil, time.Time{}, err
	}
	return f.Store.MirrorDocument(ctx, name)
}

func (f *Faulty) ObservePod(ctx context.Context, id string, o store.Observation) (store.WorkPod, bool, error) {
	if err := f.fault("ObservePod"); err != nil {
		return store.WorkPod{}, false, err
	}
	return f.Store.ObservePod(ctx, id, o)
}

func (f *Faulty) PodHistory(ctx context.Context, id string) ([]store.HistoryEntry, error) {
	if err := f.fault("PodHistory"); err != nil {
		return nil, err
	}
	return f.Store.PodHistory(ctx, id)
}

func (f *Faulty) ClaimEpoch(ctx context.Context, cluster string, epoch int64) error {
	if err := f.fault("ClaimEpoch"); err != nil {
		return err
	}
	return f.Store.ClaimEpoch(ctx, cluster, epoch)
}

func (f *Faulty) DigestKey(ctx context.Context) ([]byte, error) {
	if err := f.fault("DigestKey"); err != nil {
		return nil, err
	}
	return f.Store.DigestKey(ctx)
}

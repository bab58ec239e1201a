package api

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"crucible.dev/crucible/internal/dispatch"
	"crucible.dev/crucible/internal/render"
	"crucible.dev/crucible/internal/store"
)

// fakeStore is an in-memory store.Store with the contract's sentinels and
// list order (newest first, then id), for the API's unit tests. Each row
// is created 1ms after the previous one, so the order is deterministic.
// err, when set, is what every call returns (a store that is down).
type fakeStore struct {
	mu    sync.Mutex
	rows  map[string]store.WorkPod
	arts  map[string]store.Artifact // by pod/kind
	clock time.Time
	err   error
}

var _ store.Store = (*fakeStore)(nil)

func newFakeStore() *fakeStore {
	return &fakeStore{rows: map[string]store.WorkPod{}, arts: map[string]store.Artifact{},
		clock: time.Date(2026, 11, 30, 4, 0, 0, 0, time.UTC)}
}

func (f *fakeStore) CreateWorkPod(_ context.Context, p store.WorkPod) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	if _, dup := f.rows[p.ID]; dup {
		return fmt.Errorf("create %s: %w", p.ID, store.ErrConflict)
	}
	if p.IdempotencyKey != "" {
		if prev, err := f.byKey(p.Submitter, p.IdempotencyKey); err == nil {
			return fmt.Errorf("create %s: %w by %s", p.ID, store.ErrKeyTaken, prev.ID)
		}
	}
	f.clock = f.clock.Add(time.Millisecond)
	p.CreatedAt, p.UpdatedAt = f.clock, f.clock
	f.rows[p.ID] = p
	return nil
}

func (f *fakeStore) GetWorkPods(_ context.Context, ids []string) (map[string]store.WorkPod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	out := map[string]store.WorkPod{}
	for _, id := range ids {
		if p, ok := f.rows[id]; ok {
			p.Spec = nil
			out[id] = p
		}
	}
	return out, nil
}

func (f *fakeStore) GetWorkPod(_ context.Context, id string) (store.WorkPod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return store.WorkPod{}, f.err
	}
	p, ok := f.rows[id]
	if !ok {
		return store.WorkPod{}, fmt.Errorf("work pod %s: %w", id, store.ErrNotFound)
	}
	return p, nil
}

func (f *fakeStore) GetWorkPodByKey(_ context.Context, submitter, key string) (store.WorkPod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return store.WorkPod{}, f.err
	}
	return f.byKey(submitter, key)
}

// byKey finds submitter's row with idempotency key key; f.mu is held.
func (f *fakeStore) byKey(submitter, key string) (store.WorkPod, error) {
	for _, p := range f.rows {
		if key != "" && p.Submitter == submitter && p.IdempotencyKey == key {
			return p, nil
		}
	}
	return store.WorkPod{}, fmt.Errorf("work pod of key %q: %w", key, store.ErrNotFound)
}

func (f *fakeStore) ListWorkPods(_ context.Context, flt store.Filter) ([]store.WorkPod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	var out []store.WorkPod
	for _, p := range f.rows {
		switch {
		case flt.Cluster != "" && p.Cluster != flt.Cluster,
			flt.Kind != "" && p.Kind != flt.Kind,
			len(flt.States) > 0 && !slices.Contains(flt.States, p.State),
			flt.After != nil && !after(p, *flt.After):
			continue
		}
		if flt.WithoutSpec {
			p.Spec = nil
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b store.WorkPod) int {
		return cmp.Or(b.CreatedAt.Compare(a.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	if flt.Limit > 0 && len(out) > flt.Limit {
		out = out[:flt.Limit]
	}
	return out, nil
}

// after reports whether p comes after c in the list order.
func after(p store.WorkPod, c store.Cursor) bool {
	return p.CreatedAt.Before(c.CreatedAt) || p.CreatedAt.Equal(c.CreatedAt) && p.ID > c.ID
}

func (f *fakeStore) UpdateWorkPod(_ context.Context, id string, fn func(*store.WorkPod) error) (store.WorkPod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return store.WorkPod{}, f.err
	}
	p, ok := f.rows[id]
	if !ok {
		return store.WorkPod{}, fmt.Errorf("work pod %s: %w", id, store.ErrNotFound)
	}
	if err := fn(&p); err != nil {
		return store.WorkPod{}, fmt.Errorf("update work pod %s: %w", id, err)
	}
	p.UpdatedAt = f.clock
	f.rows[id] = p
	return p, nil
}

func (f *fakeStore) TransitionWorkPod(_ context.Context, id string, t store.Transition) (store.WorkPod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return store.WorkPod{}, f.err
	}
	p, ok := f.rows[id]
	if !ok {
		return store.WorkPod{}, fmt.Errorf("transition work pod %s: %w", id, store.ErrNotFound)
	}
	f.clock = f.clock.Add(time.Millisecond)
	if err := t.Apply(&p, f.clock); err != nil {
		return store.WorkPod{}, fmt.Errorf("transition work pod %s: %w", id, err)
	}
	f.rows[id] = p
	p.Spec = nil // as the store returns it
	return p, nil
}

func (f *fakeStore) PutArtifact(_ context.Context, a store.Artifact, _ store.Quota) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return false, f.err
	}
	if _, ok := f.rows[a.PodID]; !ok {
		return false, fmt.Errorf("artifact of %s: %w", a.PodID, store.ErrNotFound)
	}
	key := a.PodID + "/" + a.Kind
	if prev, ok := f.arts[key]; ok {
		if prev.SHA256 != a.SHA256 {
			return false, fmt.Errorf("artifact %s: %w", key, store.ErrConflict)
		}
		return false, nil
	}
	a.CreatedAt = f.clock
	f.arts[key] = a
	return true, nil
}

func (f *fakeStore) GetArtifact(_ context.Context, podID, kind string) (store.Artifact, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return store.Artifact{}, f.err
	}
	a, ok := f.arts[podID+"/"+kind]
	if !ok {
		return store.Artifact{}, fmt.Errorf("artifact %s/%s: %w", podID, kind, store.ErrNotFound)
	}
	return a, nil
}

func (f *fakeStore) ListArtifacts(_ context.Context, podID string) ([]store.Artifact, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	var out []store.Artifact
	for _, a := range f.arts {
		if a.PodID == podID {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b store.Artifact) int { return cmp.Compare(a.Kind, b.Kind) })
	return out, nil
}

func (f *fakeStore) Close() error { return nil }

// fakeArtifacts holds artifact bytes by content address.
type fakeArtifacts struct {
	mu    sync.Mutex
	bytes map[string][]byte // by pod/kind/digest
}

var _ ArtifactReader = (*fakeArtifacts)(nil)

func (f *fakeArtifacts) Open(_ context.Context, podID, kind, digest string) (io.ReadCloser, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.bytes[podID+"/"+kind+"/"+digest]
	if !ok {
		return nil, fmt.Errorf("open %s/%s: %w", podID, kind, fs.ErrNotExist)
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

func (f *fakeArtifacts) put(podID, kind, digest string, b []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.bytes == nil {
		f.bytes = map[string][]byte{}
	}
	f.bytes[podID+"/"+kind+"/"+digest] = b
}

// fakeDispatcher answers every spoke call with its configured error and
// records what it was asked.
type fakeDispatcher struct {
	mu                             sync.Mutex
	dispatchErr, deleteErr, logErr error
	calls                          []string
	// hold, when set, keeps every Dispatch waiting (after it is noted)
	// until it is closed: a dispatch in flight.
	hold chan struct{}
	// during, when set, runs inside every Dispatch with the work pod's id:
	// what others (the watch) do meanwhile.
	during func(id string)
}

var _ Dispatcher = (*fakeDispatcher)(nil)

func (f *fakeDispatcher) note(call string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
}

func (f *fakeDispatcher) called() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func (f *fakeDispatcher) Dispatch(_ context.Context, cluster string, w render.WorkPod) (dispatch.Result, error) {
	f.note("dispatch " + cluster)
	if f.hold != nil {
		<-f.hold
	}
	if f.during != nil {
		f.during(w.ID)
	}
	if f.dispatchErr != nil {
		return dispatch.Result{}, f.dispatchErr
	}
	return dispatch.Result{Namespace: "loops", PodUID: types.UID("uid-" + w.ID)}, nil
}

func (f *fakeDispatcher) Delete(_ context.Context, cluster, _, name string, _ types.UID) error {
	f.note("delete " + cluster + " " + name)
	return f.deleteErr
}

func (f *fakeDispatcher) FollowLogs(_ context.Context, cluster, _, name string, _ time.Time, _ bool) (io.ReadCloser, error) {
	f.note("logs " + cluster + " " + name)
	if f.logErr != nil {
		return nil, f.logErr
	}
	return io.NopCloser(bytes.NewReader(nil)), nil
}

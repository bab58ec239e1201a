package api

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"crucible.dev/crucible/internal/dispatch"
	"crucible.dev/crucible/internal/workpod"
)

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
	// dispatched are the work pods Dispatch was given, in order.
	dispatched []workpod.WorkPod
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

func (f *fakeDispatcher) Dispatch(_ context.Context, cluster string, v workpod.Valid) (dispatch.Result, error) {
	w := v.Pod()
	f.note("dispatch " + cluster)
	f.mu.Lock()
	f.dispatched = append(f.dispatched, w)
	f.mu.Unlock()
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

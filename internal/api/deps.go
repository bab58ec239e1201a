package api

import (
	"context"
	"io"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"crucible.dev/crucible/internal/dispatch"
	"crucible.dev/crucible/internal/fleet"
	"crucible.dev/crucible/internal/store"
	"crucible.dev/crucible/internal/workpod"
)

// Store is what the API reads and writes of the store: work-pod rows, their
// history and artifact records (store.Store; events.Store when changes are
// published).
// It never writes artifacts or closes the store.
type Store interface {
	CreateWorkPod(ctx context.Context, p store.WorkPod) (store.WorkPod, error)
	GetWorkPod(ctx context.Context, id string) (store.WorkPod, error)
	GetWorkPodByKey(ctx context.Context, submitter, key string) (store.WorkPod, error)
	ListWorkPods(ctx context.Context, f store.Filter) ([]store.WorkPod, error)
	CountLive(ctx context.Context) (map[string]store.LiveCounts, error)
	UpdateWorkPod(ctx context.Context, id string, fn func(*store.WorkPod) error) (store.WorkPod, error)
	TransitionWorkPod(ctx context.Context, id string, t store.Transition) (store.WorkPod, error)
	MoveWorkPod(ctx context.Context, id string, m store.Move) (store.WorkPod, error)
	PodHistory(ctx context.Context, id string) ([]store.HistoryEntry, error)
	GetArtifact(ctx context.Context, podID, kind string) (store.Artifact, error)
	ListArtifacts(ctx context.Context, podID string) ([]store.Artifact, error)
	DigestKey(ctx context.Context) ([]byte, error)
}

// Dispatcher is the spoke side of submit, cancel and the live log
// (*dispatch.Dispatcher).
type Dispatcher interface {
	Dispatch(ctx context.Context, cluster string, w workpod.Valid) (dispatch.Result, error)
	Delete(ctx context.Context, cluster, namespace, name string, uid types.UID) error
	FollowLogs(ctx context.Context, cluster, namespace, name string, since time.Time, follow bool) (io.ReadCloser, error)
}

// Clusters is the fleet's clients as GET /api/clusters and the live log's
// pod status read them (*fleet.Clients).
type Clusters interface {
	All() []*fleet.Client
	Get(name string) (*fleet.Client, bool)
	// Draining: removed from the profile, its live pods followed to
	// their end.
	Draining(name string) bool
}

// Settler brings a work pod's row up to date with its pod on the spoke
// (the reconciler): a live log that ended is answered with how the
// pod ended even when the pod's watch lags behind.
type Settler interface {
	Settle(ctx context.Context, id string) (store.WorkPod, error)
}

// Dispatches is told of every dispatch this server runs (the reconciler,
// reconcile.Reconciler.Dispatching): while one is in flight, what the
// pod's watch shows waits for the dispatch's own record of the row
// instead of racing it; done is called once that record is written or
// given up.
type Dispatches interface {
	Dispatching(id string) (done func())
}

// noDispatches is the Dispatches of a server without a reconciler.
type noDispatches struct{}

func (noDispatches) Dispatching(string) func() { return func() {} }

// storeSettler is the Settler of a server without a reconciler: the row as
// the store has it.
type storeSettler struct{ Store Store }

func (s storeSettler) Settle(ctx context.Context, id string) (store.WorkPod, error) {
	return s.Store.GetWorkPod(ctx, id)
}

var (
	_ Settler    = storeSettler{}
	_ Dispatches = noDispatches{}
	_ Store      = store.Store(nil)
	_ Dispatcher = (*dispatch.Dispatcher)(nil)
	_ Clusters   = (*fleet.Clients)(nil)
)

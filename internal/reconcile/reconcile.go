// Package reconcile keeps the store's work-pod rows in step with the pods on
// the spokes (R-C4–R-C7): one label-selected informer per cluster feeds pod
// changes to a work queue (no per-pod polling); what a pod's status says of
// its start (scheduled, image pulled, started) and why it waits is recorded
// on its row and in its history (R-P2); a finished pod's log is pulled
// into the "log" artifact before anything may delete the pod; at startup each
// cluster's first list re-attaches live rows, dispatches the rows a submit
// persisted but never dispatched and marks confirmed-gone ones lost; and a
// periodic sweep deletes what is collected or orphaned.
//
// A cluster that cannot be listed is left alone — its rows untouched, its pods
// not swept — and retried: an outage must neither abort a run nor reap a pod.
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"crucible.dev/crucible/internal/dispatch"
	"crucible.dev/crucible/internal/fleet"
	"crucible.dev/crucible/internal/ingest"
	"crucible.dev/crucible/internal/metrics"
	"crucible.dev/crucible/internal/retry"
	"crucible.dev/crucible/internal/store"
	"crucible.dev/crucible/internal/workpod"
)

// Reconciler watches every cluster of the fleet and drives the rows.
// Workers, SweepPage, Retry and the Dispatcher's log bound are the
// profile's, defaulted by package profile: Start refuses a zero one rather
// than pick its own. Log is no profile setting: nil logs to slog.Default.
type Reconciler struct {
	Store      store.Store
	Dispatcher *dispatch.Dispatcher
	Clients    *fleet.Clients
	Artifacts  LogBlobs
	Uploads    ingest.Uploads // told when a pod's log is collected (default: nobody)
	Instance   string
	Retry      retry.Policy
	// SweepInterval and OrphanGrace drive the sweep; zero disables it.
	SweepInterval, OrphanGrace time.Duration
	// PendingGrace is how long a submit may take to create its pod (the
	// API's dispatch timeout). With several replicas a row written before
	// this leader started may belong to a submit still running on another
	// replica: startup reconcile judges rows younger than this only once it
	// has passed. Zero judges every row at once (one replica).
	PendingGrace time.Duration
	Log          *slog.Logger
	// Workers is how many rows of one cluster are synced at a time
	// (reconcile.workers). Each cluster has a queue and workers of its own:
	// a sync waits on its cluster (a log collection on a spoke that stopped
	// answering waits out its retries), and one spoke's waits must not hold
	// up the rows of the others.
	Workers int
	// OnWatchRetry, when set, is told of every reconnect of a cluster's
	// pod watch: the failed attempt (from 1 since the last established
	// watch) and the delay before the next (rewatch).
	OnWatchRetry func(cluster string, attempt int, delay time.Duration)
	// SweepPage is how many pods one list request of the sweep returns
	// (reconcile.sweep_page): the sweep holds one page of full pods at a
	// time, never a cluster's 50,000 (hundreds of MiB decoded).
	SweepPage int64
	// Placer places a pod past its class's spill_after again (spill.go);
	// nil: placed pods never move.
	Placer Placer

	inflight inflight // rows whose dispatch runs in this process (Dispatching)
	once     sync.Once
	setupErr error
	mu       sync.RWMutex
	caches   map[string]podCache
	queues   map[string]workqueue.TypedRateLimitingInterface[key]
}

// key names one pod on one cluster.
type key struct{ Cluster, Name string }

// Selector selects the pods of this controller instance.
func Selector(instance string) labels.Selector {
	return labels.SelectorFromSet(labels.Set{workpod.LabelManagedBy: workpod.ManagedByValue, workpod.LabelInstance: instance})
}

// ErrUnconfigured is returned by Start for a reconciler built without the
// profile's values.
var ErrUnconfigured = errors.New("reconciler not configured from the profile")

// Start runs every cluster's loops (RunCluster) until ctx ends.
func (r *Reconciler) Start(ctx context.Context) error {
	if err := r.setup(); err != nil {
		return err
	}
	var wg sync.WaitGroup
	for _, c := range r.Clients.All() {
		wg.Go(func() { _ = r.RunCluster(ctx, c) })
	}
	wg.Wait()
	return nil
}

// setup validates the reconciler once and makes what its clusters' loops
// share.
func (r *Reconciler) setup() error {
	r.once.Do(func() {
		if r.setupErr = r.validate(); r.setupErr != nil {
			return
		}
		if r.Log == nil {
			r.Log = slog.Default()
		}
		r.caches = map[string]podCache{}
		r.queues = map[string]workqueue.TypedRateLimitingInterface[key]{}
	})
	return r.setupErr
}

// ErrClusterRunning refuses a second RunCluster of a cluster whose loops
// run already: two informers would sync every row twice.
var ErrClusterRunning = errors.New("cluster's loops run already")

// RunCluster runs cluster c's loops until ctx ends: its pod informer (whose
// first list is the cluster's startup reconcile), its queue and workers,
// and its sweep; then it waits for them to return. The controller runs one
// per cluster of the fleet, starts one for a spoke added at runtime, and
// moves a changed spoke to its new client by ending the old one's and
// starting another: the new informer's first list brings every row up to
// date with what happened between the two, as a relist after a broken
// watch does.
func (r *Reconciler) RunCluster(ctx context.Context, c *fleet.Client) error {
	if err := r.setup(); err != nil {
		return err
	}
	name := c.Entry.Name
	q := workqueue.NewTypedRateLimitingQueue(rowRateLimiter())
	r.mu.Lock()
	if _, running := r.queues[name]; running {
		r.mu.Unlock()
		return fmt.Errorf("cluster %s: %w", name, ErrClusterRunning)
	}
	r.queues[name] = q
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.queues, name)
		delete(r.caches, name)
		r.mu.Unlock()
	}()
	var wg sync.WaitGroup
	r.watch(ctx, c, time.Now(), &wg)
	for range r.Workers {
		wg.Go(func() {
			for r.next(ctx, q) {
			}
		})
	}
	if r.SweepInterval > 0 {
		wg.Go(func() { r.sweepLoop(ctx, name) })
	}
	<-ctx.Done()
	q.ShutDown()
	wg.Wait()
	return nil
}

// validate reports every profile value Start needs that is zero: their
// defaults are package profile's, and a reconciler without them would pick
// none (no workers) or a wrong one (an unbounded sweep list).
func (r *Reconciler) validate() error {
	var errs []error
	for _, f := range []struct {
		key string
		ok  bool
	}{
		{"reconcile.workers (Workers)", r.Workers > 0},
		{"reconcile.sweep_page (SweepPage)", r.SweepPage > 0},
		{"the retry policy (Retry)", r.Retry.Initial > 0 && r.Retry.Max > 0 && r.Retry.Budget > 0},
		{"pods.max_log_bytes (Dispatcher.Pods)", r.Dispatcher != nil && r.Dispatcher.Pods.MaxLogBytes > 0},
	} {
		if !f.ok {
			errs = append(errs, fmt.Errorf("%w: %s must be positive", ErrUnconfigured, f.key))
		}
	}
	return errors.Join(errs...)
}

// watch starts cluster c's informer. Its first LIST is the startup
// reconcile's list: one per cluster, however many rows and pods; the rows
// created before started are judged by it. The cache holds cachedPods
// (cachePod) and no index: it is read by name only.
func (r *Reconciler) watch(ctx context.Context, c *fleet.Client, started time.Time, wg *sync.WaitGroup) {
	name := c.Entry.Name
	inf := r.podInformer(c)
	if err := inf.SetTransform(cachePod); err != nil {
		r.Log.Error("set pod transform", "cluster", name, "error", err)
		return
	}
	enqueue := func(obj any) {
		if pod, ok := eventPodName(obj); ok {
			r.enqueue(key{Cluster: name, Name: pod})
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}); err != nil {
		r.Log.Error("add pod event handler", "cluster", name, "error", err)
		return
	}
	_ = inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		r.Log.Warn("watch pods failed; relisting", "cluster", name, "error", err)
	})
	r.mu.Lock()
	r.caches[name] = podCache{indexer: inf.GetIndexer(), namespace: c.Entry.LoopNamespace}
	r.mu.Unlock()
	wg.Go(func() { inf.RunWithContext(ctx) })
	wg.Go(func() {
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			return
		}
		r.startupReconcile(ctx, name, started)
	})
}

// podInformer is cluster c's informer of this instance's pods in its loop
// namespace, listing and watching through a rewatch of its own.
func (r *Reconciler) podInformer(c *fleet.Client) cache.SharedIndexInformer {
	selector := Selector(r.Instance).String()
	pods := c.Kube.CoreV1().Pods(c.Entry.LoopNamespace)
	rw := &rewatch{Cluster: c.Entry.Name, Initial: reconnectInitial, Max: reconnectMax, Server: c.Kube.CoreV1().RESTClient(), Log: r.Log}
	if r.OnWatchRetry != nil {
		onRetry := r.OnWatchRetry
		rw.OnRetry = func(attempt int, delay time.Duration) { onRetry(c.Entry.Name, attempt, delay) }
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			return rw.list(ctx, func(ctx context.Context) (runtime.Object, error) { return pods.List(ctx, o) })
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			return rw.watch(ctx, func(ctx context.Context) (watch.Interface, error) { return pods.Watch(ctx, o) })
		},
	}
	return cache.NewSharedIndexInformerWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, c.Kube), &corev1.Pod{},
		cache.SharedIndexInformerOptions{Indexers: cache.Indexers{}})
}

// startupPage is how many rows the startup reconcile reads at a time: with
// 50,000 live rows on a cluster, holding them all at once would cost tens of
// MiB for the reconcile's few seconds.
const startupPage = 1000

// startupReconcile attributes the rows of cluster that were live when the
// reconciler started to the pods its first list returned: found ones are
// queued (and so resumed, never re-dispatched); missing ones are lost — the
// list succeeded, so their pods are confirmed gone — except rows a submit
// persisted and never dispatched, which are dispatched now (redispatch).
// Rows younger than PendingGrace are judged after it (recheck). The rows are
// read a page at a time (keyset pages, so a row marked lost meanwhile shifts
// nothing).
func (r *Reconciler) startupReconcile(ctx context.Context, cluster string, started time.Time) {
	var t startupTally
	f := store.Filter{Cluster: cluster, States: store.LiveStates, WithoutSpec: true, Limit: startupPage}
	for {
		rows, err := r.Store.ListWorkPods(ctx, f)
		if err != nil {
			r.Log.Error("startup reconcile: list rows", "cluster", cluster, "error", err)
			return
		}
		t.rows += len(rows)
		for _, row := range rows {
			r.startupJudge(ctx, cluster, started, row, &t)
		}
		if len(rows) < startupPage {
			break
		}
		last := rows[len(rows)-1]
		f.After = &store.Cursor{CreatedAt: last.CreatedAt, ID: last.ID}
	}
	r.Log.Info("startup reconcile done", "cluster", cluster, "rows", t.rows, "resumed", t.resumed, "lost", t.lost, "redispatched", t.redispatched, "deferred", len(t.young))
	r.recheck(ctx, cluster, t.young)
}

// startupTally is what the startup reconcile did with a cluster's rows.
type startupTally struct {
	rows, resumed, lost, redispatched int
	young                             []store.WorkPod // judged after PendingGrace
}

// startupJudge resumes, defers or loses one live row at startup.
func (r *Reconciler) startupJudge(ctx context.Context, cluster string, started time.Time, row store.WorkPod, t *startupTally) {
	if !row.CreatedAt.Before(started) {
		return // dispatched after the loops started; its own events drive it
	}
	switch pod, err := r.cache(cluster).get(row.ID); {
	case err != nil:
		r.Log.Error("startup reconcile: read pod cache", "cluster", cluster, "pod", row.ID, "error", err)
		return // never judged on a cache that cannot answer
	case pod != nil:
		r.enqueue(key{Cluster: cluster, Name: row.ID})
		t.resumed++
		return
	}
	if time.Since(row.CreatedAt) < r.PendingGrace {
		t.young = append(t.young, row) // another replica may be creating its pod right now
		return
	}
	switch r.judgeAbsent(ctx, cluster, row, "pod not found on "+cluster+" at startup") {
	case absentRedispatched:
		t.redispatched++
	case absentLost:
		t.lost++
	}
}

// absentVerdict is what judgeAbsent did with a row.
type absentVerdict int

const (
	absentFailed       absentVerdict = iota // an error, logged
	absentRedispatched                      // never dispatched: redispatch ran
	absentLost                              // marked lost
)

// judgeAbsent decides a live row whose pod a successful list confirmed
// absent: one never dispatched is dispatched now (redispatch), any other
// had a pod that vanished and is lost with reason.
func (r *Reconciler) judgeAbsent(ctx context.Context, cluster string, row store.WorkPod, reason string) absentVerdict {
	if neverDispatched(row) {
		if err := r.redispatch(ctx, cluster, row); err != nil {
			r.Log.Error("redispatch", "cluster", cluster, "pod", row.ID, "error", err)
		}
		return absentRedispatched
	}
	if _, err := r.markLost(ctx, row.ID, reason); err != nil {
		r.Log.Error("mark lost", "cluster", cluster, "pod", row.ID, "error", err)
		return absentFailed
	}
	return absentLost
}

// recheck judges rows whose submit may have been in flight at startup once
// PendingGrace has passed for the youngest: a pod that came meanwhile is in
// the informer's cache (and its events queued it already); a row still live
// without one is lost.
func (r *Reconciler) recheck(ctx context.Context, cluster string, rows []store.WorkPod) {
	if len(rows) == 0 {
		return
	}
	var last time.Time
	for _, row := range rows {
		if row.CreatedAt.After(last) {
			last = row.CreatedAt
		}
	}
	select {
	case <-ctx.Done():
		return
	case <-time.After(time.Until(last.Add(r.PendingGrace))):
	}
	pods := r.cache(cluster)
	for _, row := range rows {
		switch pod, err := pods.get(row.ID); {
		case err != nil:
			r.Log.Error("recheck: read pod cache", "cluster", cluster, "pod", row.ID, "error", err)
			continue
		case pod != nil:
			r.enqueue(key{Cluster: cluster, Name: row.ID})
			continue
		}
		r.judgeAbsent(ctx, cluster, row, "pod not found on "+cluster+" after its dispatch timeout")
	}
}

func (r *Reconciler) cache(cluster string) podCache {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.caches[cluster]
}

// enqueue queues k on its cluster's queue, if the cluster's loops run
// here (they end, on a reload or a handoff, before their informer does).
func (r *Reconciler) enqueue(k key) {
	r.mu.RLock()
	q := r.queues[k.Cluster]
	r.mu.RUnlock()
	if q != nil {
		q.Add(k)
	}
}

// maxRowBackoff caps how long a row that keeps failing waits before its next
// sync (client-go's default per-item cap is 1000 s): a log that failed for
// minutes is collected within a minute of its spoke serving it again.
const maxRowBackoff = time.Minute

// rowRateLimiter is client-go's default controller rate limiter — per-row
// exponential backoff from 5 ms, and an overall 10 qps bucket (burst 100) —
// with the per-row backoff capped at maxRowBackoff.
func rowRateLimiter() workqueue.TypedRateLimiter[key] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[key](5*time.Millisecond, maxRowBackoff),
		&workqueue.TypedBucketRateLimiter[key]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}

// next syncs the next row of one cluster's queue q.
func (r *Reconciler) next(ctx context.Context, q workqueue.TypedRateLimitingInterface[key]) bool {
	k, shutdown := q.Get()
	if shutdown {
		return false
	}
	defer q.Done(k)
	if err := r.sync(ctx, k); err != nil {
		if ctx.Err() != nil {
			return true
		}
		r.Log.Warn("sync work pod; will retry", "cluster", k.Cluster, "pod", k.Name, "error", err)
		q.AddRateLimited(k)
		return true
	}
	q.Forget(k)
	return true
}

// markLost ends a live row lost for reason; false when it had ended
// meanwhile, and keeps that verdict.
func (r *Reconciler) markLost(ctx context.Context, id, reason string) (bool, error) {
	row, err := r.Store.TransitionWorkPod(ctx, id, lose(reason))
	if errors.Is(err, store.ErrConflict) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	metrics.ReconcileLost.WithLabelValues(row.Cluster).Inc()
	metrics.PodTransitions.WithLabelValues(row.Cluster, string(store.StateLost)).Inc()
	return true, nil
}

// errSkip aborts an UpdateWorkPod whose row needs no change.
var errSkip = errors.New("no change")

package capacity

import (
	"context"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
)

// ReserveTTL bounds how long a placement in flight counts against its
// spoke's view when its pod never shows bound there (it waits, or its
// create failed after the decision): long enough for a spoke's scheduler
// to bind a pod that fits, short enough that a pod stuck waiting does not
// hold the capacity it never got.
const ReserveTTL = 2 * time.Minute

// Fleet is the views of the spokes that have one (capacity = true), kept in
// step with the fleet's clients as reloads change them. Every replica keeps
// its own: each answers submits. It also samples each view's GPUs into an
// occupancy history (the UI's Capacity page).
type Fleet struct {
	log     *slog.Logger
	every   time.Duration // between samples
	history *History

	mu    sync.Mutex
	ctx   context.Context // Run's; nil before Run and after it returns
	views map[string]*fleetView
}

type fleetView struct {
	client kubernetes.Interface
	view   *View
	stop   context.CancelFunc
	done   chan struct{}
}

// NewFleet is a fleet of no views until Run and Sync.
func NewFleet(log *slog.Logger) *Fleet {
	if log == nil {
		log = slog.Default()
	}
	return &Fleet{log: log, every: HistoryInterval, history: NewHistory(HistorySamples), views: map[string]*fleetView{}}
}

// SampleEvery samples the views every d instead of HistoryInterval (the
// history then covers HistorySamples × d): for tests, which cannot wait
// half a minute a sample. Call it before Run.
func (f *Fleet) SampleEvery(d time.Duration) *Fleet {
	f.every = d
	return f
}

// Run runs the views Sync asks for until ctx ends, then stops them all
// and waits for their watches to end.
func (f *Fleet) Run(ctx context.Context, spokes map[string]kubernetes.Interface) {
	f.mu.Lock()
	f.ctx = ctx
	f.mu.Unlock()
	f.Sync(spokes)
	<-ctx.Done()
	f.mu.Lock()
	f.ctx = nil
	views := f.views
	f.views = map[string]*fleetView{}
	f.mu.Unlock()
	for _, v := range views {
		v.stop()
		<-v.done
	}
}

// Sync makes the views those of spokes, each on its current client: a
// spoke no longer listed, or whose client changed (a reload moved it),
// has its view stopped, and a new one is started on the new client. A
// spoke no longer listed loses its history too; one whose client changed
// keeps it. Before Run it does nothing; Run syncs first.
func (f *Fleet) Sync(spokes map[string]kubernetes.Interface) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ctx == nil {
		return
	}
	for name, v := range f.views {
		if client, ok := spokes[name]; !ok || client != v.client {
			v.stop()
			delete(f.views, name)
		}
	}
	f.history.Keep(func(name string) bool { _, ok := spokes[name]; return ok })
	for name, client := range spokes {
		if _, ok := f.views[name]; ok {
			continue
		}
		ctx, stop := context.WithCancel(f.ctx)
		v := &fleetView{client: client, view: New(client, Options{Cluster: name, Log: f.log}), stop: stop, done: make(chan struct{})}
		go func() {
			defer close(v.done)
			var sampler sync.WaitGroup
			sampler.Go(func() { f.sample(ctx, name, v.view) })
			if err := v.view.Start(ctx); err != nil && ctx.Err() == nil {
				f.log.Error("capacity view stopped", "cluster", name, "error", err)
			}
			sampler.Wait()
		}()
		f.views[name] = v
	}
}

// sample records view's GPUs into the history as soon as it syncs (a page
// opened after a start has a point at once), then every f.every until ctx
// ends.
func (f *Fleet) sample(ctx context.Context, cluster string, v *View) {
	if v.WaitForSync(ctx) != nil {
		return
	}
	tick := time.NewTicker(f.every)
	defer tick.Stop()
	for {
		f.record(cluster, v)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// record samples v into cluster's history while v is still cluster's
// view: a sample taken as Sync stops it must not bring back the history
// Sync just dropped.
func (f *Fleet) record(cluster string, v *View) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if cur, ok := f.views[cluster]; !ok || cur.view != v {
		return
	}
	f.history.Record(cluster, time.Now().UTC(), v.Summary())
}

// History is cluster's GPU occupancy per product over its last samples,
// oldest first; ok is false without a view.
func (f *Fleet) History(cluster string) (series []Series, ok bool) {
	f.mu.Lock()
	_, ok = f.views[cluster]
	f.mu.Unlock()
	if !ok {
		return nil, false
	}
	return f.history.Series(cluster), true
}

func (f *Fleet) view(cluster string) (*View, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.views[cluster]
	if !ok {
		return nil, false
	}
	return v.view, true
}

// Judge is cluster's view's verdict on pod; ok is false when cluster has
// no view or it has not synced yet (no verdict is better than one made on
// half a list).
func (f *Fleet) Judge(cluster string, pod *corev1.Pod) (Verdict, bool) {
	v, ok := f.view(cluster)
	if !ok || !v.Synced() {
		return Verdict{}, false
	}
	return v.Judge(pod), true
}

// Reserve counts pod, about to be sent to cluster, against cluster's view
// until the view sees it bound, or ReserveTTL.
func (f *Fleet) Reserve(cluster string, pod *corev1.Pod) {
	if v, ok := f.view(cluster); ok {
		v.Reserve(pod.Namespace, pod.Name, pod, ReserveTTL)
	}
}

// ReserveUntil counts pod, which another replica placed on cluster, against
// cluster's view until the view sees it bound, or until.
func (f *Fleet) ReserveUntil(cluster string, pod *corev1.Pod, until time.Time) {
	if v, ok := f.view(cluster); ok {
		v.ReserveUntil(pod.Namespace, pod.Name, pod, until)
	}
}

// Release stops counting the pod namespace/name against cluster's view.
func (f *Fleet) Release(cluster, namespace, name string) {
	if v, ok := f.view(cluster); ok {
		v.Release(namespace, name)
	}
}

// Summary is cluster's view now; ok is false without one.
func (f *Fleet) Summary(cluster string) (Summary, bool) {
	v, ok := f.view(cluster)
	if !ok {
		return Summary{}, false
	}
	return v.Summary(), true
}

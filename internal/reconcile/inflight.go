package reconcile

import (
	"slices"
	"sync"
)

// inflight is the rows whose pods this process is creating right now (a
// submit's dispatch). The watch sees a pod as soon as it is created, before
// the dispatch has created its ConfigMap and Secret and recorded the row
// dispatched; a sync then would read the row pending and record it
// dispatched itself, and the dispatch's own record would find it done and
// read it again: two writes and three reads of one row where one write
// does. So a sync of a row in flight is put off, and the dispatch, once it
// has recorded its outcome, queues it again (done). A row dispatched by
// another replica is not in flight here: its syncs record it dispatched as
// before (recordDispatched), which keeps a sync correct either way.
type inflight struct {
	mu   sync.Mutex
	rows map[string]*flight
}

// flight is one row's dispatches in flight and the clusters whose syncs of
// it were put off.
type flight struct {
	n     int
	syncs []string
}

func (f *inflight) begin(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rows == nil {
		f.rows = map[string]*flight{}
	}
	fl := f.rows[id]
	if fl == nil {
		fl = &flight{}
		f.rows[id] = fl
	}
	fl.n++
}

// end ends one dispatch of id and returns, when it was the last, the
// clusters whose syncs of id were put off meanwhile.
func (f *inflight) end(id string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl := f.rows[id]
	if fl == nil {
		return nil
	}
	if fl.n--; fl.n > 0 {
		return nil
	}
	delete(f.rows, id)
	return fl.syncs
}

// putOff reports whether id's dispatch is in flight, remembering then that
// cluster's sync of it is owed.
func (f *inflight) putOff(cluster, id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl := f.rows[id]
	if fl == nil {
		return false
	}
	if slices.Contains(fl.syncs, cluster) {
		return true
	}
	fl.syncs = append(fl.syncs, cluster)
	return true
}

// Dispatching tells the reconciler that this process is creating row id's
// pod, until done is called once the dispatch has recorded its outcome in
// the row (or given up): the pod's syncs wait for that record instead of
// racing it, then run.
func (r *Reconciler) Dispatching(id string) (done func()) {
	r.inflight.begin(id)
	var once sync.Once
	return func() {
		once.Do(func() {
			for _, cluster := range r.inflight.end(id) {
				r.enqueue(key{Cluster: cluster, Name: id})
			}
		})
	}
}

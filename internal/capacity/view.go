package capacity

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// Options configures a View.
type Options struct {
	// Cluster names the spoke in the view's log lines.
	Cluster string
	// Log receives the watches' failures; nil means slog.Default().
	Log *slog.Logger
	// Clock times reservations; nil means the real clock.
	Clock clock.PassiveClock
}

// View is one spoke's capacity: its nodes and its non-terminal pods, as
// the spoke's watch shows them, and the reservations of placements in
// flight. Start runs its watches; every other method is safe to call from
// any goroutine at any time (before the watches have synced, Judge says
// the capacity is not known yet).
type View struct {
	opts  Options
	nodes cache.Controller
	pods  cache.Controller
	// podStore is the pod informer's store of *cachedPod: Reserve asks it
	// whether a pod shows bound already.
	podStore cache.Store
	// hasSynced is Synced's answer: both informers' HasSynced (unit tests
	// of the judgment feed events by hand and set it).
	hasSynced func() bool

	mu    sync.RWMutex
	state map[string]*nodeState // by node name
	// order is every state with a Node, by name: Judge walks it.
	order        []*nodeState
	reservations map[string]*reservation // by podKey
	nextExpiry   time.Time               // earliest reservation expiry; zero when none
	// unbound sums the requests of the pods no node took yet: the spoke's
	// queue, which a pod that would wait there joins (Verdict.Queued).
	unbound requests

	startOnce sync.Once
}

// New returns spoke client's capacity view; Start runs its watches.
func New(client kubernetes.Interface, opts Options) *View {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	v := &View{opts: opts, state: map[string]*nodeState{}, reservations: map[string]*reservation{}}
	_, v.nodes = cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: cache.ToListWatcherWithWatchListSemantics(nodeListWatch(client), client),
		ObjectType:    &corev1.Node{},
		Transform:     slimNode,
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { v.onNode(obj, false) },
			UpdateFunc: func(_, obj any) { v.onNode(obj, false) },
			DeleteFunc: func(obj any) { v.onNode(obj, true) },
		},
	})
	v.podStore, v.pods = cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: cache.ToListWatcherWithWatchListSemantics(podListWatch(client), client),
		ObjectType:    &corev1.Pod{},
		Transform:     transformPod,
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { v.onPod(nil, obj) },
			UpdateFunc: v.onPod,
			DeleteFunc: func(obj any) { v.onPod(obj, nil) },
		},
	})
	v.hasSynced = func() bool { return v.nodes.HasSynced() && v.pods.HasSynced() }
	return v
}

// nonTerminal is the field selector of kube-scheduler's own pod informer
// (scheduler.NewInformerFactory): a pod that succeeded or failed holds
// nothing, and the watch reports it deleted when it gets there.
const nonTerminal = "status.phase!=" + string(corev1.PodSucceeded) + ",status.phase!=" + string(corev1.PodFailed)

func podListWatch(client kubernetes.Interface) *cache.ListWatch {
	pods := client.CoreV1().Pods(metav1.NamespaceAll)
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = nonTerminal
			return pods.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = nonTerminal
			return pods.Watch(ctx, o)
		},
	}
}

func nodeListWatch(client kubernetes.Interface) *cache.ListWatch {
	nodes := client.CoreV1().Nodes()
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return nodes.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return nodes.Watch(ctx, o)
		},
	}
}

// ErrStarted refuses a second Start: one view, one pair of watches.
var ErrStarted = errors.New("capacity view started already")

// Start runs the view's watches until ctx ends, then returns once they
// have stopped. It is the view's runnable; WaitForSync waits for the
// first lists.
func (v *View) Start(ctx context.Context) error {
	started := false
	v.startOnce.Do(func() { started = true })
	if !started {
		return fmt.Errorf("cluster %s: %w", v.opts.Cluster, ErrStarted)
	}
	var wg sync.WaitGroup
	wg.Go(func() { v.nodes.RunWithContext(ctx) })
	wg.Go(func() { v.pods.RunWithContext(ctx) })
	wg.Wait()
	return nil
}

// Synced reports whether both watches have delivered their first list.
func (v *View) Synced() bool { return v.hasSynced() }

// WaitForSync waits until Synced or ctx ends (its error, then).
func (v *View) WaitForSync(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), v.nodes.HasSynced, v.pods.HasSynced) {
		return fmt.Errorf("capacity view of %s: %w", v.opts.Cluster, context.Cause(ctx))
	}
	return nil
}

// onNode takes a node event into its state.
func (v *View) onNode(obj any, deleted bool) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	n, ok := obj.(*corev1.Node)
	if !ok {
		v.opts.Log.Error("capacity: node event without a node", "cluster", v.opts.Cluster, "type", fmt.Sprintf("%T", obj))
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	s := v.stateLocked(n.Name)
	had := s.node != nil
	if deleted {
		n = nil
	}
	s.setNode(n)
	if had != (n != nil) {
		v.reorderLocked()
	}
	v.dropIfUnusedLocked(s)
}

// onPod moves a pod's requests from its old node to its new one (either
// nil: added, deleted) and ends its reservation once it shows bound or
// gone.
func (v *View) onPod(oldObj, newObj any) {
	oldPod, newPod := eventPod(oldObj), eventPod(newObj)
	v.mu.Lock()
	defer v.mu.Unlock()
	if oldPod != nil {
		v.countLocked(oldPod, -1)
	}
	if newPod != nil {
		v.countLocked(newPod, 1)
	}
	switch {
	case newPod == nil && oldPod != nil:
		v.releaseLocked(oldPod.key())
	case newPod != nil && newPod.nodeName() != "":
		v.releaseLocked(newPod.key())
	}
}

// eventPod is the cached pod an event carries (nil: none, or not a pod).
func eventPod(obj any) *cachedPod {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	p, _ := obj.(*cachedPod)
	return p
}

// countLocked adds (sign 1) or removes (-1) a bound pod's requests on its node.
func (v *View) countLocked(p *cachedPod, sign int64) {
	node := p.nodeName()
	if node == "" {
		v.unbound.add(&p.req, sign)
		return
	}
	s := v.stateLocked(node)
	s.used.add(&p.req, sign)
	s.pods += sign
	v.dropIfUnusedLocked(s)
}

// stateLocked is node name's state, made on first use.
func (v *View) stateLocked(name string) *nodeState {
	s, ok := v.state[name]
	if !ok {
		s = &nodeState{name: strings.Clone(name)}
		v.state[name] = s
	}
	return s
}

func (v *View) dropIfUnusedLocked(s *nodeState) {
	if s.unused() {
		delete(v.state, s.name)
	}
}

// reorderLocked rebuilds order after a node came or went.
func (v *View) reorderLocked() {
	v.order = v.order[:0]
	for _, s := range v.state {
		if s.node != nil {
			v.order = append(v.order, s)
		}
	}
	slices.SortFunc(v.order, func(a, b *nodeState) int { return strings.Compare(a.name, b.name) })
}

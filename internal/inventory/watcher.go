package inventory

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	cpv1alpha1 "sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"
	cpclient "sigs.k8s.io/cluster-inventory-api/client/clientset/versioned"
	cpinformers "sigs.k8s.io/cluster-inventory-api/client/informers/externalversions"
)

// settle is how long the Watcher lets changes gather before it hands the
// set on: a cluster manager that publishes fifty ClusterProfiles at once
// makes one reload, not fifty.
const settle = 500 * time.Millisecond

// listWarnAfter is how long the first list may take before the Watcher
// logs what may be missing.
const listWarnAfter = 30 * time.Second

// Watcher follows the ClusterProfiles of one hub namespace (and selector)
// and hands Apply the whole set, sorted by name, once they are listed and
// again after every change. Apply runs on one goroutine, one call at a
// time; a change during a call is handed on after it.
type Watcher struct {
	Client    cpclient.Interface
	Namespace string
	Selector  string
	Apply     func(ctx context.Context, profiles []*cpv1alpha1.ClusterProfile)
	Log       *slog.Logger
}

// Start runs until ctx ends. It returns an error only if the selector does
// not parse (the profile's validation has checked it).
func (w *Watcher) Start(ctx context.Context) error {
	if _, err := labels.Parse(w.Selector); err != nil {
		return fmt.Errorf("cluster profile selector %q: %w", w.Selector, err)
	}
	factory := cpinformers.NewSharedInformerFactoryWithOptions(w.Client, 0, cpinformers.WithNamespace(w.Namespace),
		cpinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = w.Selector }))
	informer := factory.Apis().V1alpha1().ClusterProfiles()
	changed := make(chan struct{}, 1)
	poke := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	if _, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke() },
		UpdateFunc: func(any, any) { poke() },
		DeleteFunc: func(any) { poke() },
	}); err != nil {
		return err
	}
	lister := informer.Lister().ClusterProfiles(w.Namespace)
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	w.Log.Info("following ClusterProfiles", "namespace", w.Namespace, "selector", w.Selector)
	// A hub without the CRD, or RBAC without list, leaves the list failing
	// and retried in client-go's own log: say here what is missing.
	slow := time.AfterFunc(listWarnAfter, func() {
		w.Log.Warn("ClusterProfiles not listed yet: is the ClusterProfile CRD installed on the hub, and may the controller get, list and watch them there?",
			"namespace", w.Namespace, "waited", listWarnAfter)
	})
	synced := cache.WaitForCacheSync(ctx.Done(), informer.Informer().HasSynced)
	slow.Stop()
	if !synced {
		return nil // ctx ended: the controller is stopping
	}
	poke() // the first set, even an empty one
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(settle):
		}
		list, err := lister.List(labels.Everything()) // the informer lists by the selector already
		if err != nil {
			w.Log.Error("read the ClusterProfiles", "error", err)
			continue
		}
		slices.SortFunc(list, func(a, b *cpv1alpha1.ClusterProfile) int { return strings.Compare(a.Name, b.Name) })
		w.Apply(ctx, list)
	}
}

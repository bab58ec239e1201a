package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/dispatch"
	"crucible.dev/crucible/internal/fleet"
	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/reconcile"
	"crucible.dev/crucible/internal/retry"
	"crucible.dev/crucible/internal/store"
	"crucible.dev/crucible/internal/store/storetest"
	"crucible.dev/crucible/internal/workpod"
)

// The sweep reads a cluster a page at a time and acts on every page: with
// pages of 3, the orphans spread over several pages are all deleted (a
// sweep that stopped after its first page, or lost its place after the
// deletions, leaves some), the pods of live rows on any page are kept, and
// another instance's pods are not touched. Run against the real API server
// with the controller's federated identity; the rows in a store of its own.
func TestSweepPages(t *testing.T) {
	s := sharedStack(t)
	wharf := s.Spoke("wharf")
	const instance, other = "sweep-pages", "sweep-pages-other"
	pods := wharf.Client.CoreV1().Pods(devstack.SpokeNamespace)
	mk := func(name, inst string) *corev1.Pod {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
				workpod.LabelManagedBy: workpod.ManagedByValue, workpod.LabelInstance: inst, workpod.LabelWorkPod: name}},
			Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, NodeSelector: holdSelector, // never run
				Containers: []corev1.Container{{Name: "c", Image: "x"}}},
		}
		got, err := pods.Create(t.Context(), pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = pods.Delete(context.WithoutCancel(t.Context()), name, metav1.DeleteOptions{}) })
		return got
	}
	st := storetest.SQLite(t)
	var orphans, live, others []string
	for i := range 7 {
		orphans = append(orphans, mk(fmt.Sprintf("sweep-pages-orphan-%d", i), instance).Name)
	}
	for i := range 3 {
		p := mk(fmt.Sprintf("sweep-pages-live-%d", i), instance)
		live = append(live, p.Name)
		if _, err := st.CreateWorkPod(t.Context(), store.WorkPod{ID: p.Name, Cluster: "wharf", Namespace: devstack.SpokeNamespace,
			Kind: "turn", State: store.StateRunning, PodUID: string(p.UID)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 {
		others = append(others, mk(fmt.Sprintf("sweep-pages-other-%d", i), other).Name)
	}

	entry := s.ClusterEntry(wharf)
	entry.QPS, entry.Burst = 100, 200
	clients, err := fleet.NewClients([]profile.ClusterEntry{entry})
	if err != nil {
		t.Fatal(err)
	}
	policy := retry.Policy{Initial: 100 * time.Millisecond, Max: time.Second, Budget: 10 * time.Second}
	r := &reconcile.Reconciler{
		Store: st, Clients: clients, Instance: instance, Retry: policy,
		Dispatcher:  &dispatch.Dispatcher{Clients: clients, Instance: instance, Retry: policy},
		OrphanGrace: time.Nanosecond, SweepPage: 3, Log: slog.New(slog.DiscardHandler),
	}
	r.Sweep(t.Context(), "wharf")

	gone := func(name string) bool {
		p, err := pods.Get(t.Context(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true
		}
		if err != nil {
			t.Fatalf("get %s: %v", name, err)
		}
		return p.DeletionTimestamp != nil
	}
	for _, name := range orphans {
		if !gone(name) {
			t.Errorf("orphan %s was not swept", name)
		}
	}
	for _, name := range append(live, others...) {
		if gone(name) {
			t.Errorf("%s was swept; its row is live or it is another instance's", name)
		}
	}
}

package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	_ "modernc.org/sqlite" // the driver crucible's store uses

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/workpod"
)

// floorDoes is what the floor does for a submit, for the report's method.
const floorDoes = "an HTTP handler in the benchmark's process (net/http, encoding/json) that inserts a row with the request (database/sql over modernc.org/sqlite, " +
	"WAL, synchronous NORMAL, one writer, as crucible's store), creates the same Pod, ConfigMap and Secret with client-go, records the pod's uid in the row, and answers 201; " +
	"an informer per spoke (client-go, protobuf) watches its pods and records the scheduler's verdict in the row when it changes. " +
	"It has none of crucible's own work: no authentication or authorization, idempotency, history, events, metrics, logs or reconciler"

// floorInstance labels the floor's pods, so its informers see only them.
const floorInstance = "floor"

// startFloor serves the floor for the dispatch benchmark and returns its
// URL: the least a service with crucible's contract must do for a submit
// (R-C9: an HTTP API; R-C2: a row in the store, written before the pod is
// created so that nothing is lost, and again with its pod; R-C3: the pod's
// fate followed on the spoke, by a watch), made of the libraries crucible
// uses and nothing of crucible's. create makes one set as instance
// on a spoke, as the raw loop's do. The floor takes the same request body as
// crucible's POST /api/pods, so one load generator drives both.
func startFloor(b *testing.B, clients map[string]kubernetes.Interface, s *devstack.Stack,
	create func(ctx context.Context, instance, spoke, id string) (*corev1.Pod, error)) string {
	b.Helper()
	db, err := sql.Open("sqlite", filepath.Join(b.TempDir(), "floor.db")+
		"?_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=busy_timeout(10000)&_txlock=immediate")
	if err != nil {
		b.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	b.Cleanup(func() { db.Close() })
	// A row is what crucible's is in kind: the request, where it went, its
	// state and pod, why it waits. The state index is the least a restart
	// needs (its live rows).
	if _, err := db.ExecContext(b.Context(), `CREATE TABLE pods (
		id TEXT PRIMARY KEY, cluster TEXT NOT NULL, state TEXT NOT NULL, pod_uid TEXT NOT NULL DEFAULT '', spec BLOB NOT NULL,
		waiting_reason TEXT NOT NULL DEFAULT '', waiting_message TEXT NOT NULL DEFAULT '', created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL) STRICT;
		CREATE INDEX pods_state ON pods (state)`); err != nil {
		b.Fatal(err)
	}
	// The informers stop before their factories wait for them, and after
	// the server (registered later, closed first) has no request left.
	ctx, stop := context.WithCancel(context.Background())
	var factories []informers.SharedInformerFactory
	b.Cleanup(func() {
		stop()
		for _, f := range factories {
			f.Shutdown()
		}
	})
	for name, c := range clients {
		factory := informers.NewSharedInformerFactoryWithOptions(c, 0, informers.WithNamespace(s.Spoke(name).LoopNamespace),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = workpod.LabelInstance + "=" + floorInstance }))
		pods := factory.Core().V1().Pods().Informer()
		record := func(obj any) {
			if pod, ok := obj.(*corev1.Pod); ok {
				if err := floorObserve(ctx, db, pod); err != nil && ctx.Err() == nil {
					b.Errorf("floor: record %s: %v", pod.Name, err)
				}
			}
		}
		if _, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: record, UpdateFunc: func(_, obj any) { record(obj) }}); err != nil {
			b.Fatal(err)
		}
		factory.Start(ctx.Done())
		factories = append(factories, factory)
		if !cache.WaitForCacheSync(b.Context().Done(), pods.HasSynced) {
			b.Fatalf("floor: the informer of %s did not sync", name)
		}
	}
	var ids atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req apiv1.SubmitRequest
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		id := fmt.Sprintf("floor-%d", ids.Add(1))
		spec, err := json.Marshal(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		now := time.Now().UnixNano()
		if _, err := db.ExecContext(r.Context(), `INSERT INTO pods (id, cluster, state, spec, created_at, updated_at) VALUES (?, ?, 'pending', ?, ?, ?)`,
			id, req.Cluster, spec, now, now); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		pod, err := create(r.Context(), floorInstance, req.Cluster, id)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		if _, err := db.ExecContext(r.Context(), `UPDATE pods SET state = 'dispatched', pod_uid = ?, updated_at = ? WHERE id = ? AND state = 'pending'`,
			string(pod.UID), time.Now().UnixNano(), id); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(apiv1.WorkPod{ID: id, Cluster: req.Cluster, State: "dispatched", PodUID: string(pod.UID)})
	}))
	b.Cleanup(srv.Close)
	return srv.URL
}

// floorObserve records why pod waits, when the scheduler said so and the
// row does not say it yet: one conditional UPDATE, as crucible's record of a
// changed wait is one write.
func floorObserve(ctx context.Context, db *sql.DB, pod *corev1.Pod) error {
	for _, c := range pod.Status.Conditions {
		if c.Type != corev1.PodScheduled || c.Status != corev1.ConditionFalse {
			continue
		}
		_, err := db.ExecContext(ctx, `UPDATE pods SET waiting_reason = ?, waiting_message = ?, updated_at = ? WHERE id = ? AND (waiting_reason <> ? OR waiting_message <> ?)`,
			c.Reason, c.Message, time.Now().UnixNano(), pod.Name, c.Reason, c.Message)
		return err
	}
	return nil
}

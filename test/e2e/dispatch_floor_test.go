package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	_ "modernc.org/sqlite" // the driver crucible's store uses

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/workpod"
)

// floorDoes is what the floor does for a submit, for the report's method;
// with lifecycle, what it does for a pod that runs to the end too.
func floorDoes(lifecycle bool) string {
	does := "an HTTP handler in the benchmark's process (net/http, encoding/json) that inserts a row with the request (database/sql over modernc.org/sqlite, " +
		"WAL, synchronous NORMAL, one writer, as crucible's store), creates the same Pod, ConfigMap and Secret with client-go, records the pod's uid in the row, and answers 201; " +
		"an informer per spoke (client-go, protobuf) watches its pods and records the scheduler's verdict in the row when it changes"
	if lifecycle {
		does += fmt.Sprintf(", and %d workers a spoke (a client-go workqueue, as crucible's reconciler has) record a pod running, and, once it has ended, "+
			"read its log with client-go into a file, record its outcome and delete it (its ConfigMap and Secret left to the spokes' garbage collector, as crucible leaves them)", floorWorkers)
	}
	return does + ". It has none of crucible's own work: no authentication or authorization, idempotency, history, events, metrics, own logs, retries or sweep"
}

// floorWorkers is how many pods of a spoke the floor's lifecycle handles at
// once: crucible's reconciler's default.
const floorWorkers = profile.DefaultWorkers

// floorInstance labels the floor's pods, so its informers see only them.
const floorInstance = "floor"

// startFloor serves the floor for the dispatch benchmark and returns its
// URL: the least a service with crucible's contract must do for a submit
// (R-C9: an HTTP API; R-C2: a row in the store, written before the pod is
// created so that nothing is lost, and again with its pod; R-C3: the pod's
// fate followed on the spoke, by a watch), made of the libraries crucible
// uses and nothing of crucible's. create makes one set as instance
// on a spoke, as the raw loop's do. The floor takes the same request body as
// crucible's POST /api/pods, so one load generator drives both. With
// lifecycle its pods run to the end, and the floor does what crucible's
// contract asks of a pod that ends (R-C7: its log kept before anything
// deletes it; R-C6: the pod then deleted) with the same libraries.
func startFloor(b *testing.B, clients map[string]kubernetes.Interface, s *devstack.Stack, lifecycle bool,
	create func(ctx context.Context, instance, spoke, id string) (*corev1.Pod, error)) *floorService {
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
		waiting_reason TEXT NOT NULL DEFAULT '', waiting_message TEXT NOT NULL DEFAULT '', exit_code INTEGER, log_bytes INTEGER,
		created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL) STRICT;
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
	f := &floorService{db: db, logs: b.TempDir()}
	for name, c := range clients {
		factory := informers.NewSharedInformerFactoryWithOptions(c, 0, informers.WithNamespace(s.Spoke(name).LoopNamespace),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = workpod.LabelInstance + "=" + floorInstance }))
		pods := factory.Core().V1().Pods().Informer()
		var queue workqueue.TypedRateLimitingInterface[string]
		if lifecycle {
			queue = workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
			b.Cleanup(queue.ShutDown)
			for range floorWorkers {
				go f.work(ctx, c, pods.GetStore(), queue)
			}
		}
		record := func(obj any) {
			if pod, ok := obj.(*corev1.Pod); ok {
				if err := floorObserve(ctx, db, pod); err != nil && ctx.Err() == nil {
					b.Errorf("floor: record %s: %v", pod.Name, err)
				}
				if queue != nil {
					queue.Add(pod.Namespace + "/" + pod.Name)
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
	f.url = srv.URL
	return f
}

// floorService is the floor startFloor serves.
type floorService struct {
	url  string
	db   *sql.DB
	logs string // where the collected logs go, a file a pod
	// lastErr is the latest error of a pod's lifecycle (retried), which
	// awaitSettled names when rows stay live.
	lastErr atomic.Pointer[error]
}

// work handles the pods queue names until it shuts down: one of a spoke's
// floorWorkers. A pod it cannot handle now (its log unreadable yet) is
// queued again with the controller rate limiter's backoff.
func (f *floorService) work(ctx context.Context, client kubernetes.Interface, pods cache.Store, queue workqueue.TypedRateLimitingInterface[string]) {
	for {
		key, shutdown := queue.Get()
		if shutdown {
			return
		}
		obj, exists, err := pods.GetByKey(key)
		if err == nil && exists {
			err = f.follow(ctx, client, obj.(*corev1.Pod))
		}
		switch {
		case err == nil:
			queue.Forget(key)
		case ctx.Err() == nil:
			f.lastErr.Store(&err)
			queue.AddRateLimited(key)
		}
		queue.Done(key)
	}
}

// follow moves pod's row on as the pod shows it: running, or, once ended,
// its log read into a file, its outcome recorded and the pod deleted. Each
// step is one conditional write, so an event seen twice does nothing twice.
func (f *floorService) follow(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod) error {
	now := time.Now().UnixNano()
	switch pod.Status.Phase {
	case corev1.PodRunning:
		_, err := f.db.ExecContext(ctx, `UPDATE pods SET state = 'running', updated_at = ? WHERE id = ? AND state IN ('pending', 'dispatched')`, now, pod.Name)
		return err
	case corev1.PodSucceeded, corev1.PodFailed:
	default:
		return nil
	}
	var live int
	if err := f.db.QueryRowContext(ctx, `SELECT count(*) FROM pods WHERE id = ? AND state IN ('pending', 'dispatched', 'running')`, pod.Name).Scan(&live); err != nil {
		return err
	}
	if live > 0 {
		n, err := f.collectLog(ctx, client, pod)
		if err != nil {
			return err
		}
		var exit *int32
		for _, cs := range pod.Status.ContainerStatuses {
			if t := cs.State.Terminated; t != nil {
				exit = &t.ExitCode
			}
		}
		if _, err := f.db.ExecContext(ctx, `UPDATE pods SET state = ?, exit_code = ?, log_bytes = ?, updated_at = ? WHERE id = ? AND state IN ('pending', 'dispatched', 'running')`,
			strings.ToLower(string(pod.Status.Phase)), exit, n, time.Now().UnixNano(), pod.Name); err != nil {
			return err
		}
	}
	err := client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions(string(pod.UID))})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone already, or another pod by that name
	}
	return err
}

// collectLog reads pod's log into a file of its own and returns its size.
func (f *floorService) collectLog(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod) (int64, error) {
	stream, err := client.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{}).Stream(ctx)
	if err != nil {
		return 0, err
	}
	defer stream.Close()
	file, err := os.Create(filepath.Join(f.logs, pod.Name+".log"))
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(file, stream)
	if cerr := file.Close(); err == nil {
		err = cerr
	}
	return n, err
}

// awaitSettled waits until the floor has no live row, and the spokes no
// object of the floor's: a turn of pods run to the end is over.
func (f *floorService) awaitSettled(b *testing.B, s *devstack.Stack, spokes []string) {
	b.Helper()
	var live int
	err := wait.PollUntilContextTimeout(b.Context(), time.Second, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		err := f.db.QueryRowContext(ctx, `SELECT count(*) FROM pods WHERE state IN ('pending', 'dispatched', 'running')`).Scan(&live)
		return err == nil && live == 0, nil
	})
	if err != nil {
		last := "none"
		if e := f.lastErr.Load(); e != nil {
			last = (*e).Error()
		}
		b.Fatalf("floor: %d rows not terminal (the latest error of a pod's lifecycle: %s): %v", live, last, err)
	}
	for _, name := range spokes {
		awaitInstanceGone(b, s.Spoke(name), floorInstance)
	}
}

// failed lists up to ten of the floor's rows that did not succeed.
func (f *floorService) failed(ctx context.Context) ([]string, error) {
	rows, err := f.db.QueryContext(ctx, `SELECT id || ' ' || state FROM pods WHERE state <> 'succeeded' LIMIT 10`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var bad []string
	for rows.Next() {
		var r string
		if err := rows.Scan(&r); err != nil {
			return nil, err
		}
		bad = append(bad, r)
	}
	return bad, rows.Err()
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

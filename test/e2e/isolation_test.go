package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"crucible.dev/crucible/internal/artifact"
	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/dispatch"
	"crucible.dev/crucible/internal/fleet"
	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/reconcile"
	"crucible.dev/crucible/internal/render"
	"crucible.dev/crucible/internal/retry"
	"crucible.dev/crucible/internal/store"
	"crucible.dev/crucible/internal/store/storetest"
	"crucible.dev/crucible/internal/testpki"
	"crucible.dev/crucible/internal/workpod"
)

// A spoke whose pod logs never answer — a node whose kubelet hangs, or an
// API server gone quiet mid-request — holds up only its own rows: each
// cluster's rows are synced by workers of their own. With one worker per
// cluster, wharf's finished pod has its log request held by a proxy in
// front of wharf's real API server (everything else passes); dock's pod,
// started after, is still recorded succeeded with its log. With one queue
// for all clusters the one worker waits on wharf and dock's row never moves.
func TestHungSpokeHoldsOnlyItsOwnRows(t *testing.T) {
	s := sharedStack(t)
	wharf, dock := s.Spoke("wharf"), s.Spoke("dock")
	seen := make(chan string, 64)
	proxyURL, proxyCA := logProxy(t, wharf.Server, s.CAFile, holdLogs, seen)
	iso := isolatedReconciler(t, s, proxyURL, proxyCA, 10*time.Minute)
	st, run := iso.Store, iso.Run

	wName, dName := "isolation-w-"+suffix(), "isolation-d-"+suffix()
	run(wharf, wName, "echo from wharf")
	awaitLogRequest(t, seen, wName)

	run(dock, dName, "echo from dock")
	var row store.WorkPod
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		row, err = st.GetWorkPod(ctx, dName)
		return err == nil && row.State == store.StateSucceeded && row.LogCollected, nil
	})
	if err != nil {
		t.Fatalf("dock's row is %s (log collected %t) while wharf's log request hangs: one spoke held up another's rows", row.State, row.LogCollected)
	}
	checkNotCollected(t, st, wName)
}

// A spoke that answers every pod log with an error (its node has no
// address, say) holds up none of its own other rows: a finished pod's log
// is retried for logRetryBudget, then the row waits its backoff and the
// worker goes on. With one worker and a retry budget of ten minutes,
// wharf's second pod, started after the first one's log began failing, is
// recorded running with its uid — which its pushes wait for — while the
// first one's log is still refused.
func TestFailingLogsHoldNoOtherRow(t *testing.T) {
	s := sharedStack(t)
	wharf := s.Spoke("wharf")
	seen := make(chan string, 64)
	proxyURL, proxyCA := logProxy(t, wharf.Server, s.CAFile, failLogs, seen)
	iso := isolatedReconciler(t, s, proxyURL, proxyCA, 10*time.Minute)
	st, run := iso.Store, iso.Run

	first, second := "failing-logs-1-"+suffix(), "failing-logs-2-"+suffix()
	run(wharf, first, "echo done")
	awaitLogRequest(t, seen, first)

	run(wharf, second, "sleep 600")
	var row store.WorkPod
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		row, err = st.GetWorkPod(ctx, second)
		return err == nil && row.State == store.StateRunning && row.PodUID != "", nil
	})
	if err != nil {
		t.Fatalf("wharf's second row is %s (uid %q) while the first one's log keeps failing: the failing log held the cluster's worker", row.State, row.PodUID)
	}
	checkNotCollected(t, st, first)
}

// isolated is a reconciler of a test's own, on a store of its own.
type isolated struct {
	Store      store.Store
	Reconciler *reconcile.Reconciler
	Artifacts  artifact.Dir
	// Run records a pending row and creates its pod on a spoke, running
	// command.
	Run func(spoke *devstack.Cluster, name, command string)
}

// isolatedReconciler runs a reconciler of its own (instance "isolation",
// one worker per cluster, retry budget budget) on a store of its own, with
// wharf reached through the proxy at proxyURL and dock directly.
func isolatedReconciler(t *testing.T, s *devstack.Stack, proxyURL, proxyCA string, budget time.Duration, configure ...func(*reconcile.Reconciler)) isolated {
	t.Helper()
	const instance = "isolation"
	st := storetest.SQLite(t)
	viaProxy, direct := s.ClusterEntry(s.Spoke("wharf")), s.ClusterEntry(s.Spoke("dock"))
	viaProxy.Server, viaProxy.CAFile = proxyURL, proxyCA
	viaProxy.QPS, viaProxy.Burst, direct.QPS, direct.Burst = 100, 200, 100, 200
	clients, err := fleet.NewClients([]profile.ClusterEntry{viaProxy, direct})
	if err != nil {
		t.Fatal(err)
	}
	policy := retry.Policy{Initial: 100 * time.Millisecond, Max: time.Second, Budget: budget}
	arts := artifact.Dir{Root: t.TempDir()}
	r := &reconcile.Reconciler{
		Store: st, Clients: clients, Instance: instance, Retry: policy, Workers: 1, SweepPage: profile.DefaultSweepPage,
		Dispatcher: &dispatch.Dispatcher{Clients: clients, Instance: instance, Retry: policy, Pods: profile.Default().Pods},
		Artifacts:  arts, Log: slog.New(slog.DiscardHandler),
	}
	for _, c := range configure {
		c(r)
	}
	ctx, cancel := context.WithCancel(t.Context())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		if err := r.Start(ctx); err != nil {
			t.Errorf("reconciler: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-stopped }) // before the proxy closes: its held request ends with this

	run := func(spoke *devstack.Cluster, name, command string) {
		t.Helper()
		if _, err := st.CreateWorkPod(t.Context(), store.WorkPod{ID: name, Cluster: spoke.Name, Namespace: devstack.SpokeNamespace,
			Kind: "turn", State: store.StatePending}); err != nil {
			t.Fatal(err)
		}
		pods := spoke.Client.CoreV1().Pods(devstack.SpokeNamespace)
		_, err := pods.Create(t.Context(), &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
				workpod.LabelManagedBy: workpod.ManagedByValue, workpod.LabelInstance: instance, workpod.LabelWorkPod: name}},
			Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: render.ContainerName, Image: "x", Command: []string{"sh", "-c", command}}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		zero := int64(0)
		t.Cleanup(func() {
			_ = pods.Delete(context.WithoutCancel(t.Context()), name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		})
	}
	return isolated{Store: st, Reconciler: r, Artifacts: arts, Run: run}
}

func suffix() string { return fmt.Sprintf("%x", time.Now().UnixNano()&0xffffff) }

// awaitLogRequest waits until the proxy saw the log request of pod name.
func awaitLogRequest(t *testing.T, seen <-chan string, name string) {
	t.Helper()
	timeout := time.After(2 * time.Minute)
	for {
		select {
		case path := <-seen:
			if strings.Contains(path, name) {
				return
			}
		case <-timeout:
			t.Fatalf("the reconciler never asked for the log of %s, finished on wharf", name)
		}
	}
}

// checkNotCollected fails the test when the row of pod name has its log:
// then the proxy never stood in the way and the test proved nothing.
func checkNotCollected(t *testing.T, st store.Store, name string) {
	t.Helper()
	w, err := st.GetWorkPod(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	if w.LogCollected || w.State.Terminal() {
		t.Errorf("row %s is %s (log collected %t) though its log was never served: the proxy stood in no way", name, w.State, w.LogCollected)
	}
}

// What logProxy does with a pod's log request.
const (
	holdLogs    = iota // a pod's log request held until its caller gives up
	failLogs           // a pod's log answered 503, as an API server whose node has no address answers 500
	holdWatches        // every watch request held until its caller gives up
)

// logProxy serves TLS in front of the API server at target and passes every
// request through, except a pod's log (holdLogs, failLogs) or a watch
// (holdWatches): that is held or failed, its path sent on seen. It returns the proxy's URL and the file of the CA its
// serving certificate is signed by.
func logProxy(t *testing.T, target, targetCAFile string, mode int, seen chan<- string) (string, string) {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(targetCAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("no certificate in %s", targetCAFile)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, ForceAttemptHTTP2: true}
	rp.FlushInterval = -1 // watches stream through
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if mode == holdWatches {
			if w := r.URL.Query().Get("watch"); w == "true" || w == "1" {
				select {
				case seen <- r.URL.Path:
				default:
				}
				<-r.Context().Done()
				return
			}
			rp.ServeHTTP(w, r)
			return
		}
		if strings.HasSuffix(r.URL.Path, "/log") {
			select {
			case seen <- r.URL.Path:
			default:
			}
			if mode == failLogs {
				http.Error(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"no node address","reason":"ServiceUnavailable","code":503}`, http.StatusServiceUnavailable)
				return
			}
			<-r.Context().Done()
			return
		}
		rp.ServeHTTP(w, r)
	}))
	ca := testpki.NewCA(t, "isolation-proxy")
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, "proxy", testpki.Server).Pair(t)}, MinVersion: tls.VersionTLS12}
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL, ca.Write(t, t.TempDir(), "proxy-ca.crt")
}

//go:build interop

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"crucible.dev/crucible/internal/api"
	"crucible.dev/crucible/internal/benchreport"
	"crucible.dev/crucible/internal/devstack"
)

// mkBenchPods is how many batch pods each side runs.
const mkBenchPods = 1_000

// BenchmarkMultiKueue (issue 25): the same 1,000 one-second batch pods over
// the two dev spokes, on one stack in one run, dispatched twice: by Kueue's
// MultiKueue through crucible's federation (a Job per pod submitted to the
// hub's LocalQueue; the figure ends when the hub has synced every Job
// Complete) and by crucible's own submit (a turn per pod; it ends when every
// row is terminal). Pods per second until all have completed, and the
// ratio MultiKueue / crucible: a side-by-side for the people choosing
// between the two, not a goal either must meet.
func BenchmarkMultiKueue(b *testing.B) {
	const workers = 16
	f := startMultiKueue(b, nil, kueueQuota{cpu: "1000", memory: "1000Gi"})
	s := f.s
	ctx := b.Context()
	cfg := *s.Hub.Admin
	cfg.QPS, cfg.Burst = -1, -1
	hub, err := kubernetes.NewForConfig(&cfg)
	if err != nil {
		b.Fatal(err)
	}
	command := sleeps("1s")
	spokes := []string{f.workers[0].Name, f.workers[1].Name}

	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if _, err := createLoop(ctx, workers, 0, mkBenchPods, func(ctx context.Context, i int) error {
			_, err := hub.BatchV1().Jobs(mkNamespace).Create(ctx, benchJob(fmt.Sprintf("mk-%d", i), command), metav1.CreateOptions{})
			return err
		}); err != nil {
			b.Fatalf("create the jobs: %v", err)
		}
		awaitJobsComplete(b, hub, mkBenchPods)
		mkTime := time.Since(start)
		perWorker := map[string]int{}
		wl, err := kubectl(b, s.Hub.KubeconfigFile, "get", "workloads.kueue.x-k8s.io", "-n", mkNamespace, "-o", "jsonpath={range .items[*]}{.status.clusterName}{\"\\n\"}{end}")
		if err != nil {
			b.Fatalf("the hub's Workloads: %v\n%s", err, wl)
		}
		for _, line := range splitLines(wl) {
			perWorker[line]++
		}

		start = time.Now()
		if _, err := createLoop(ctx, workers, 0, mkBenchPods, submitTurns(s.Federation.ControllerInternalURL, spokes, api.SubmitRequest{Image: "x", Command: command})); err != nil {
			b.Fatalf("submit the turns: %v", err)
		}
		awaitNoLiveRows(b, s.Federation.ControllerInternalURL)
		crucibleTime := time.Since(start)
		succeeded := countRows(b, s.Federation.ControllerInternalURL, "succeeded")
		if succeeded != mkBenchPods {
			b.Errorf("crucible: %d of %d turns succeeded", succeeded, mkBenchPods)
		}

		mkRate, crucibleRate := mkBenchPods/mkTime.Seconds(), mkBenchPods/crucibleTime.Seconds()
		b.Logf("MultiKueue %.1f pods/s (all Complete after %s, per worker %v), crucible %.1f pods/s (all terminal after %s): ratio %.2f",
			mkRate, mkTime.Round(time.Second), perWorker, crucibleRate, crucibleTime.Round(time.Second), mkRate/crucibleRate)
		b.ReportMetric(mkRate/crucibleRate, "ratio")
		rec := benchreport.Record{ID: "multikueue", Case: fmt.Sprintf("%d batch pods over 2 spokes", mkBenchPods), Unit: "pods/s", Value: mkRate, Goal: "report",
			Extra: map[string]float64{"multikueue_s_until_complete": mkTime.Seconds(), "crucible_s_until_terminal": crucibleTime.Seconds(),
				"multikueue_on_wharf": float64(perWorker["wharf"]), "multikueue_on_dock": float64(perWorker["dock"])},
			Method: fmt.Sprintf("Kueue %s MultiKueue (ClusterProfile path, crucible credential as access provider, Kueue's default client rates) "+
				"dispatching %d one-pod batch Jobs (sleep 1) created on the hub by %d workers, until the hub syncs them all Complete; then, on the same stack, "+
				"%d turns (sleep 1) submitted to crucible's API by %d workers alternating the spokes, until every row is terminal; kube-apiserver %s",
				devstack.KueueVersion, mkBenchPods, workers, mkBenchPods, workers, devstack.KubernetesVersion),
		}.WithBaseline("crucible's own submit", crucibleRate)
		if err := benchreport.Append(rec); err != nil {
			b.Fatal(err)
		}
	}
}

// benchJob is a one-pod batch Job for the hub's LocalQueue running command.
func benchJob(name string, command []string) *batchv1.Job {
	zero := int32(0)
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: mkNamespace, Labels: map[string]string{"kueue.x-k8s.io/queue-name": "lq"}},
		Spec: batchv1.JobSpec{BackoffLimit: &zero, Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "main", Image: "x", Command: command, Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")}}}},
		}}},
	}
}

// awaitJobsComplete waits until n Jobs on the hub are Complete; a failed
// one ends the benchmark.
func awaitJobsComplete(b *testing.B, hub kubernetes.Interface, n int) {
	b.Helper()
	var done int
	err := wait.PollUntilContextTimeout(b.Context(), 2*time.Second, 20*time.Minute, true, func(ctx context.Context) (bool, error) {
		jobs, err := hub.BatchV1().Jobs(mkNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		done = 0
		for _, j := range jobs.Items {
			for _, c := range j.Status.Conditions {
				if c.Status != corev1.ConditionTrue {
					continue
				}
				switch c.Type {
				case batchv1.JobComplete:
					done++
				case batchv1.JobFailed:
					return false, fmt.Errorf("job %s failed: %s", j.Name, c.Message)
				}
			}
		}
		return done >= n, nil
	})
	if err != nil {
		b.Fatalf("%d of %d jobs Complete on the hub: %v", done, n, err)
	}
}

// countRows is how many rows the controller lists in state.
func countRows(b *testing.B, controller, state string) int {
	b.Helper()
	resp, err := get(b.Context(), http.DefaultClient, controller+"/api/pods?state="+state+"&limit=10000")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	var rows []api.WorkPod
	if err := json.NewDecoder(resp.Body).Decode(&rows); err != nil {
		b.Fatal(err)
	}
	return len(rows)
}

func splitLines(s string) []string {
	var out []string
	for line := range strings.SplitSeq(s, "\n") {
		if line != "" {
			out = append(out, line)
		}
	}
	return out
}

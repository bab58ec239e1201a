package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"crucible.dev/crucible/internal/api"
	"crucible.dev/crucible/internal/benchreport"
	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
	"crucible.dev/crucible/internal/fleet"
	"crucible.dev/crucible/internal/render"
)

// BenchmarkDispatch1000 submits 1,000 turns through the controller's API and
// compares the rate with a raw client-go loop creating the same objects
// (Pod, ConfigMap, Secret) on the same spoke API server with the same
// federated identity and no client-side rate limit, in the same run.
// Reported: both rates and their ratio, the time until every row is
// terminal, and the controller's RSS.
func BenchmarkDispatch1000(b *testing.B) {
	const n, workers = 1000, 16
	s := devstacktest.Start(b, devstack.Options{
		Crucible:      devstacktest.CrucibleBinary(b),
		SweepInterval: 5 * time.Second,
	})
	wharf := s.Spoke("wharf")
	ctx := b.Context()

	cfg, err := fleet.TokenFileConfig(wharf.Server, s.CAFile, s.Federation.SpokeTokenFiles["wharf"])
	if err != nil {
		b.Fatal(err)
	}
	cfg.QPS, cfg.Burst = -1, -1
	raw, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	files := map[string]string{"input.txt": "hello"}
	secrets := map[string]string{"key": "s3cret"}
	command := sleeps("1s") // the dev runtime runs it

	rawSet := func(ctx context.Context, i int) error {
		w := render.WorkPod{ID: fmt.Sprintf("raw-%d", i), Kind: "turn", Image: "x", Command: command, Files: files, SecretFiles: secrets}
		objs, err := render.Turn(fleet.ClusterEntry{Name: "wharf", LoopNamespace: devstack.SpokeNamespace, TurnServiceAccount: devstack.SpokeServiceAccount,
			IngestURL: s.Federation.ControllerExternalURL, IngestAudience: devstack.IngestAudience}, fleet.Pods{IngestTokenExpiration: fleet.Duration{Duration: time.Hour}}, "baseline", w)
		if err != nil {
			return err
		}
		pod, err := raw.CoreV1().Pods(devstack.SpokeNamespace).Create(ctx, objs.Pod, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		render.Own(objs.ConfigMap, pod)
		render.Own(objs.Secret, pod)
		if _, err := raw.CoreV1().ConfigMaps(devstack.SpokeNamespace).Create(ctx, objs.ConfigMap, metav1.CreateOptions{}); err != nil {
			return err
		}
		_, err = raw.CoreV1().Secrets(devstack.SpokeNamespace).Create(ctx, objs.Secret, metav1.CreateOptions{})
		return err
	}
	client := &http.Client{Timeout: time.Minute}
	ids := make([]string, n)
	crucibleSet := func(ctx context.Context, i int) error {
		body, _ := json.Marshal(api.SubmitRequest{Image: "x", Command: command, Files: files, SecretFiles: secrets})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.Federation.ControllerInternalURL+"/api/pods", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(api.ClientHeader, "bench")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var wp api.WorkPod
		if resp.StatusCode != http.StatusCreated || json.NewDecoder(resp.Body).Decode(&wp) != nil {
			return fmt.Errorf("submit: %s", resp.Status)
		}
		ids[i] = wp.ID
		return nil
	}
	run := func(set func(context.Context, int) error) (float64, error) {
		var next atomic.Int64
		var first error
		var once sync.Once
		var wg sync.WaitGroup
		start := time.Now()
		for range workers {
			wg.Go(func() {
				for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
					if err := set(ctx, i); err != nil {
						once.Do(func() { first = err })
						return
					}
				}
			})
		}
		wg.Wait()
		return float64(n) / time.Since(start).Seconds(), first
	}

	b.ResetTimer()
	for range b.N {
		rawRate, err := run(rawSet)
		if err != nil {
			b.Fatalf("raw loop: %v", err)
		}
		start := time.Now()
		crucibleRate, err := run(crucibleSet)
		if err != nil {
			b.Fatalf("crucible: %v", err)
		}
		err = wait.PollUntilContextTimeout(ctx, time.Second, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
			resp, err := get(ctx, http.DefaultClient, s.Federation.ControllerInternalURL+"/api/pods?state=pending,dispatched,running&limit=10000")
			if err != nil {
				return false, nil
			}
			defer resp.Body.Close()
			var live []api.WorkPod
			if json.NewDecoder(resp.Body).Decode(&live) != nil {
				return false, nil
			}
			return len(live) == 0, nil
		})
		if err != nil {
			b.Fatalf("rows not all terminal: %v", err)
		}
		allTerminal := time.Since(start)
		rss := rssMiB(b, s.Processes()["crucible-controller"])
		b.Logf("raw client-go %.0f sets/s, crucible %.0f pods/s (ratio %.2f), all terminal after %s, controller RSS %.0f MiB",
			rawRate, crucibleRate, crucibleRate/rawRate, allTerminal.Round(time.Second), rss)
		b.ReportMetric(rawRate, "raw-sets/s")
		b.ReportMetric(crucibleRate, "crucible-pods/s")
		b.ReportMetric(crucibleRate/rawRate, "ratio")
		b.ReportMetric(allTerminal.Seconds(), "s-until-terminal")
		b.ReportMetric(rss, "controller-rss-MiB")
		rec := benchreport.Record{ID: "dispatch", Case: fmt.Sprintf("%d turn pods", n), Unit: "pods/s", Value: crucibleRate,
			Goal: "≥ 0.95×, RSS ≤ 150 MB", Extra: map[string]float64{"s_until_terminal": allTerminal.Seconds(), "controller_rss_mib": rss},
			Method: fmt.Sprintf("%d POST /api/pods from %d workers to the controller vs a raw client-go loop creating the same Pod, ConfigMap "+
				"and Secret with the same federated identity and no client rate limit, spoke wharf; kube-apiserver %s", n, workers, devstack.KubernetesVersion),
		}.WithBaseline("raw client-go create loop", rawRate)
		if err := benchreport.Append(rec.Judged(rec.Ratio >= 0.95 && rss*1.048576 <= 150)); err != nil {
			b.Fatal(err)
		}
		pods, _ := wharf.Client.CoreV1().Pods(devstack.SpokeNamespace).List(ctx, metav1.ListOptions{LabelSelector: render.LabelInstance + "=" + devstack.Instance})
		for _, p := range pods.Items {
			if p.Status.Phase != corev1.PodSucceeded {
				b.Errorf("pod %s phase %s", p.Name, p.Status.Phase)
			}
		}
	}
}

func rssMiB(b testing.TB, pid int) float64 {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			return kb / 1024
		}
	}
	return 0
}

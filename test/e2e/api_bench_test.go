package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"crucible.dev/crucible/internal/benchreport"
	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
	"crucible.dev/crucible/internal/store"
)

// BenchmarkAPIPodsFirstPage fills the controller's store with 100,000
// finished work pods, restarts the controller over them, and measures GET
// /api/pods (the first page, no parameters) as a browser or `crucible pods`
// asks it: latency over sequential requests, the body size, and the
// controller's RSS afterwards. It reports; it has no goal.
func BenchmarkAPIPodsFirstPage(b *testing.B) {
	const rows, requests = 100_000, 20
	s := devstacktest.Start(b, devstack.Options{Crucible: devstacktest.CrucibleBinary(b), SweepInterval: time.Hour})
	ctx := b.Context()
	if err := s.KillProcess("crucible-controller"); err != nil {
		b.Fatal(err)
	}
	st, err := store.Open(ctx, "sqlite:"+filepath.Join(s.Dir, "crucible", "crucible.db"))
	if err != nil {
		b.Fatal(err)
	}
	fillStart := time.Now()
	for i := range rows {
		code := int32(0)
		row := store.WorkPod{ID: fmt.Sprintf("api-bench-%06d", i), Cluster: "wharf", Namespace: devstack.SpokeNamespace, Kind: "turn",
			State: store.StateSucceeded, ExitCode: &code}
		if _, err := st.CreateWorkPod(ctx, row); err != nil {
			b.Fatal(err)
		}
	}
	st.Close()
	b.Logf("stored %d finished rows in %s", rows, time.Since(fillStart).Round(time.Second))
	if err := s.RestartProcess(ctx, "crucible-controller", s.ControllerReady); err != nil {
		b.Fatal(err)
	}
	client := &http.Client{Timeout: 2 * time.Minute}
	url := s.Federation.ControllerInternalURL + "/api/pods"
	b.ResetTimer()
	for b.Loop() {
		lat := make([]time.Duration, requests)
		var size int64
		for i := range lat {
			start := time.Now()
			n, err := fetch(ctx, client, url)
			if err != nil {
				b.Fatal(err)
			}
			lat[i], size = time.Since(start), n
		}
		slices.Sort(lat)
		rss := rssMiB(b, s.Processes()["crucible-controller"])
		p50, p99 := lat[len(lat)/2], lat[len(lat)-1]
		b.Logf("GET /api/pods over %d rows: p50 %s, max %s, %d bytes, controller RSS %.0f MiB", rows, p50, p99, size, rss)
		b.ReportMetric(ms(p50), "p50-ms")
		b.ReportMetric(rss, "controller-rss-MiB")
		rec := benchreport.Record{ID: "api", Case: "GET /api/pods first page, 100,000 rows", Unit: "ms (p50)", Value: ms(p50), LowerIsBetter: true, Goal: "report",
			Extra:  map[string]float64{"max_ms": ms(p99), "body_bytes": float64(size), "controller_rss_mib": rss},
			Method: fmt.Sprintf("%d sequential GETs without parameters to the controller's internal API over %d finished rows in SQLite; RSS from /proc after them", requests, rows)}
		if err := benchreport.Append(rec); err != nil {
			b.Fatal(err)
		}
	}
}

// fetch GETs url and returns the size of a 200 body.
func fetch(ctx context.Context, client *http.Client, url string) (int64, error) {
	resp, err := get(ctx, client, url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return n, nil
}

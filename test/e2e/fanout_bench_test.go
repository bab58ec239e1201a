package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/benchreport"
	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
	"crucible.dev/crucible/internal/render"
	"crucible.dev/crucible/internal/workpod"
)

// BenchmarkFanout: one pod, 500 SSE viewers of its live log through the
// controller, against one client reading pods/log?follow directly from the
// spoke as the baseline, in the same run. Reports the upstream streams open
// at the spoke (goal 1), lines delivered per second, p99 delivery latency
// (arrival minus the line's runtime timestamp) and the controller's RSS.
// It reports; it never fails on a figure.
func BenchmarkFanout(b *testing.B) {
	const viewers, lines = 500, 1000
	s := devstacktest.Start(b, devstack.Options{Crucible: devstacktest.CrucibleBinary(b)})
	wharf := s.Spoke("wharf")
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	g := newGate(b)
	// The pod prints one line, then its lines once every viewer got that
	// one, ten every 10 ms, then idles until the benchmark ends.
	script, _ := printLinesPausing("fanout line", 1, lines, "0.01")
	id := benchPod(b, s, g, `echo "fanout ready"; `+awaitGate("go")+script+`touch "$G/printed"; sleep 3600`)
	waitRunning(b, s, id)
	rssBefore := rssMiB(b, s.Processes()["crucible-controller"])

	// The baseline: one direct follower at the spoke.
	var direct directView
	directDone := make(chan struct{})
	go func() { defer close(directDone); direct.follow(ctx, wharf, id) }()
	views, wg := startViewers(b, ctx, s, id, viewers)
	// Every viewer is connected once it got the first line; not a
	// measurement.
	waitAll(b, "got the first line", 2*time.Minute, views, func(v *sseView) bool { return v.lines() >= 1 || v.done() })

	start := time.Now()
	g.open(b, "go")
	g.waitFor(b, "printed", time.Minute)
	upstreams := logStreams(b, wharf) - 1 // minus the baseline's own stream
	waitAll(b, "got every line", 5*time.Minute, views, func(v *sseView) bool { return v.lines() >= lines+1 || v.done() })
	rss := rssMiB(b, s.Processes()["crucible-controller"])
	var lat []time.Duration
	last := start
	delivered := 0
	for _, v := range views {
		v.mu.Lock()
		for i := 1; i < len(v.at); i++ { // not the first, sent before the start
			if !v.ts[i].IsZero() {
				lat = append(lat, v.at[i].Sub(v.ts[i]))
			}
			last = later(last, v.at[i])
		}
		delivered += max(len(v.at)-1, 0)
		v.mu.Unlock()
	}
	for direct.count.Load() < lines+1 && time.Since(start) < time.Minute {
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	<-directDone
	wg.Wait()
	directLat, directLast := direct.latencies()
	rate := float64(delivered) / last.Sub(start).Seconds()
	directRate := float64(len(directLat)) / directLast.Sub(start).Seconds()
	b.Logf("upstream streams %d for %d viewers; %d lines to each: %.0f lines/s delivered in all (direct reader: %.0f lines/s), p99 latency %.1f ms (direct %.1f ms), controller RSS %.0f MiB (%.0f MiB before the viewers)",
		upstreams, viewers, lines, rate, directRate, ms(p99(lat)), ms(p99(directLat)), rss, rssBefore)
	b.ReportMetric(float64(upstreams), "upstream-streams")
	b.ReportMetric(rate, "lines/s")
	b.ReportMetric(directRate, "direct-lines/s")
	b.ReportMetric(ms(p99(lat)), "p99-ms")
	b.ReportMetric(ms(p99(directLat)), "direct-p99-ms")
	b.ReportMetric(rss, "controller-rss-MiB")
	// The row's figure is upstream streams (goal 1); delivery per viewer
	// is compared with a viewer reading pods/log directly.
	rec := benchreport.Record{ID: "fanout", Case: fmt.Sprintf("1 pod, %d SSE viewers", viewers), Unit: "upstream streams", Value: float64(upstreams),
		Goal: "1 upstream stream",
		Extra: map[string]float64{"lines_per_s_all_viewers": rate, "lines_per_s_per_viewer": rate / float64(viewers), "direct_lines_per_s": directRate,
			"p99_ms": ms(p99(lat)), "direct_p99_ms": ms(p99(directLat)), "controller_rss_mib": rss, "controller_rss_before_mib": rssBefore},
		Method: fmt.Sprintf("one pod printing %d lines; %d SSE viewers of GET /api/pods/{pod}/logs and one client reading pods/log from the spoke directly, "+
			"same run; upstream streams counted at the spoke; latency from the line's timestamp to its arrival", lines, viewers)}
	if err := benchreport.Append(rec.Judged(upstreams == 1)); err != nil {
		b.Fatal(err)
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func p99(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[min(len(d)-1, len(d)*99/100)]
}

// benchPod submits a turn running script with the gate as $G and returns
// its id.
func benchPod(b *testing.B, s *devstack.Stack, g gate, script string) string {
	b.Helper()
	data, _ := json.Marshal(apiv1.SubmitRequest{Image: "busybox", Command: []string{"sh", "-c", script}, Env: []workpod.EnvVar{g.env()}})
	req, _ := http.NewRequest(http.MethodPost, s.Federation.ControllerInternalURL+"/api/pods", bytes.NewReader(data))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(apiv1.ClientHeader, "e2e")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	var wp apiv1.WorkPod
	if resp.StatusCode != http.StatusCreated || json.NewDecoder(resp.Body).Decode(&wp) != nil {
		b.Fatalf("submit: %s", resp.Status)
	}
	return wp.ID
}

// directView follows pods/log at the spoke with the admin client.
type directView struct {
	mu    sync.Mutex
	lat   []time.Duration
	last  time.Time
	count atomic.Int64
}

func (d *directView) follow(ctx context.Context, spoke *devstack.Cluster, pod string) {
	rc, err := spoke.Client.CoreV1().Pods(devstack.SpokeNamespace).GetLogs(pod,
		&corev1.PodLogOptions{Container: render.ContainerName, Follow: true, Timestamps: true}).Stream(ctx)
	if err != nil {
		return
	}
	defer rc.Close()
	sc := bufio.NewScanner(rc)
	for sc.Scan() {
		stamp, _, _ := strings.Cut(sc.Text(), " ")
		ts, err := time.Parse(time.RFC3339Nano, stamp)
		if err != nil {
			continue
		}
		now := time.Now()
		d.mu.Lock()
		d.lat, d.last = append(d.lat, now.Sub(ts)), now
		d.mu.Unlock()
		d.count.Add(1)
	}
}

func (d *directView) latencies() ([]time.Duration, time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.lat) == 0 {
		return nil, d.last
	}
	return d.lat[1:], d.last // not the first line, printed before the start
}

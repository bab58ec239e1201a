package chaos

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"crucible.dev/crucible/internal/devstack"
)

// procStats are the controller's goroutines (its go_goroutines metric) and
// open file descriptors (/proc/PID/fd).
type procStats struct {
	Goroutines, FDs int
	// Retries is crucible_transient_retries_total summed: evidence that a
	// fault reached the controller (and that it retried).
	Retries int
}

func controllerStats(ctx context.Context, s *devstack.Stack) (procStats, error) {
	pid := s.Processes()["crucible-controller"]
	if pid == 0 {
		return procStats{}, fmt.Errorf("no controller process")
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return procStats{}, fmt.Errorf("count fds: %w", err)
	}
	// The metrics request itself holds a connection (one fd, a goroutine or
	// two) either way; both readings include it.
	m, err := scrape(ctx, s.Federation.ControllerMetricsURL)
	if err != nil {
		return procStats{}, err
	}
	g, ok := m["go_goroutines"]
	if !ok {
		return procStats{}, fmt.Errorf("no go_goroutines in the controller's metrics")
	}
	return procStats{Goroutines: int(g), FDs: len(fds), Retries: int(sum(m, "crucible_transient_retries_total"))}, nil
}

// metrics is one scrape: each series ("name{labels}") and its value.
type metrics map[string]float64

// scrape reads base/metrics (Prometheus text format; comments skipped).
func scrape(ctx context.Context, base string) (metrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("read metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("read metrics: %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	m := metrics{}
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		f, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("parse metric line %q: %w", line, err)
		}
		m[line[:i]] = f
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read metrics: %w", err)
	}
	return m, nil
}

// sum adds the series of metric name whose labels contain every one of
// labels (each written as in the exposition: outcome="created").
func sum(m metrics, name string, labels ...string) float64 {
	var total float64
	for series, v := range m {
		n, lbl, _ := strings.Cut(series, "{")
		if n != name {
			continue
		}
		all := true
		for _, l := range labels {
			all = all && strings.Contains(lbl, l)
		}
		if all {
			total += v
		}
	}
	return total
}

// byLabel is the rise of metric name from before to after per value of
// label (series whose value did not change are left out).
func byLabel(before, after metrics, name, label string) map[string]int {
	out := map[string]int{}
	for series, v := range after {
		n, lbl, _ := strings.Cut(series, "{")
		if n != name {
			continue
		}
		_, val, ok := strings.Cut(lbl, label+`="`)
		if !ok {
			continue
		}
		val, _, _ = strings.Cut(val, `"`)
		if d := int(v - before[series]); d != 0 {
			out[val] += d
		}
	}
	return out
}

// Slack over the baseline that is not a leak: idle keep-alive connections of
// clients, an informer's rewatch in flight, and — for a scenario on a stack
// of its own, whose baseline is a controller just started — the connections
// a controller holds once it has worked (its PostgreSQL pool grows from one
// connection to up to four and keeps them idle; one CI run measured 19 → 28
// fds after scenario 8). A per-pod leak of even one goroutine or fd exceeds
// it in every scenario (20 or 200 pods).
const goroutineSlack, fdSlack = 15, 12

// settle polls until the controller is back within the slack of base, and
// returns the last reading and whether it got there before within.
func settle(ctx context.Context, s *devstack.Stack, base procStats, within time.Duration) (procStats, bool) {
	deadline := time.Now().Add(within)
	var last procStats
	for {
		st, err := controllerStats(ctx, s)
		if err == nil {
			last = st
			if st.Goroutines <= base.Goroutines+goroutineSlack && st.FDs <= base.FDs+fdSlack {
				return st, true
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return last, false
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

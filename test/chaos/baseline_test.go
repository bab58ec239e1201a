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
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.Federation.ControllerMetricsURL+"/metrics", nil)
	if err != nil {
		return procStats{}, err
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return procStats{}, fmt.Errorf("read metrics: %w", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	// The metrics request itself holds a connection (one fd, a goroutine or
	// two) either way; both readings include it.
	st := procStats{Goroutines: -1, FDs: len(fds)}
	for sc.Scan() {
		line := sc.Text()
		name, v, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		switch {
		case name == "go_goroutines", strings.HasPrefix(name, "crucible_transient_retries_total"):
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return procStats{}, fmt.Errorf("parse %s %q: %w", name, v, err)
			}
			if name == "go_goroutines" {
				st.Goroutines = int(f)
			} else {
				st.Retries += int(f)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return procStats{}, fmt.Errorf("read metrics: %w", err)
	}
	if st.Goroutines < 0 {
		return procStats{}, fmt.Errorf("no go_goroutines in the controller's metrics")
	}
	return st, nil
}

// Slack over the baseline that is not a leak: idle keep-alive connections of
// clients, an informer's rewatch in flight. A per-pod leak of even one
// goroutine or fd exceeds it in every scenario (20 or 200 pods).
const goroutineSlack, fdSlack = 15, 8

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

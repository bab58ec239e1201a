package chaos

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
)

// result is one scenario's entry in chaos/results.md and results.json.
type result struct {
	// Num is the scenario's number in issue 15 (12 for its "also: a slow
	// client on each listener"); the report lists scenarios by it.
	Num       int            `json:"num"`
	Scenario  string         `json:"scenario"`
	Injected  string         `json:"injected"`
	Load      string         `json:"load"`
	Expected  string         `json:"expected"`
	Happened  string         `json:"happened"`
	Seed      int64          `json:"seed"`
	Faults    int            `json:"faults_injected"`
	Passed    bool           `json:"passed"`
	OwnStack  bool           `json:"own_stack"`
	Duration  string         `json:"duration"`
	Pods      podCounts      `json:"pods"`
	Artifacts artifactCounts `json:"artifacts"`
	Requests  map[string]int `json:"requests_by_status"`
	Before    procStats      `json:"controller_before"`
	After     procStats      `json:"controller_after"`
	Notes     []string       `json:"notes,omitempty"`
	Problems  []string       `json:"problems,omitempty"`
}

type podCounts struct {
	Submitted      int            `json:"submitted"`
	Accepted       int            `json:"accepted"`
	Interrupted    int            `json:"submits_interrupted"`
	Resubmitted    int            `json:"submits_answered_non_201"`
	Replayed       int            `json:"submits_replayed"`
	Renewed        int            `json:"replayed_rows_never_dispatched"`
	Completed      int            `json:"completed"`
	Failed         int            `json:"failed"`
	Duplicated     int            `json:"duplicated"`
	Lost           int            `json:"lost"`
	LogsWithOneRun int            `json:"logs_with_one_run"`
	OrphansAfter   int            `json:"orphans_after_sweep"`
	UnansweredRows map[string]int `json:"rows_of_submits_not_answered_201"`
}

type artifactCounts struct {
	Pushed int `json:"pushed"`
	Stored int `json:"stored"`
	Lost   int `json:"lost"`
}

var (
	resultsMu sync.Mutex
	results   []result
)

func record(r result) {
	resultsMu.Lock()
	defer resultsMu.Unlock()
	results = append(results, r)
}

// writeResults writes dir/results.md and dir/results.json; no dir (make
// test) prints the summary only.
func writeResults(dir string) error {
	resultsMu.Lock()
	defer resultsMu.Unlock()
	if len(results) == 0 {
		return nil
	}
	slices.SortStableFunc(results, func(a, b result) int { return a.Num - b.Num })
	md := markdown()
	if dir == "" {
		fmt.Fprint(os.Stderr, md)
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("make results dir: %w", err)
	}
	data, err := json.MarshalIndent(map[string]any{"full": cfg.Full, "seed": cfg.Seed, "pods_per_scenario": cfg.Pods, "scenarios": results}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("write results.json: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(md), 0o644); err != nil {
		return fmt.Errorf("write results.md: %w", err)
	}
	return nil
}

func markdown() string {
	var b strings.Builder
	mode := "reduced subset (make acceptance)"
	if cfg.Full {
		mode = "full (make chaos)"
	}
	fmt.Fprintf(&b, "# crucible chaos results\n\nRun %s, %s, %d pods per scenario, base seed %d (replay: CRUCIBLE_CHAOS_SEED=%d).\n",
		time.Now().UTC().Format(time.RFC3339), mode, cfg.Pods, cfg.Seed, cfg.Seed)
	fmt.Fprintf(&b, "Dev stack: real hub and two spokes (wharf, dock), the controller on SQLite, real pods from the dev runtime.")
	var own []string
	for _, r := range results {
		if r.OwnStack {
			own = append(own, r.Scenario)
		}
	}
	if len(own) > 0 {
		fmt.Fprintf(&b, " On stacks of their own, as their injected lines say: %s.", strings.Join(own, "; "))
	}
	fmt.Fprintf(&b, "\n")
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Fprintf(&b, "Machine: %d CPUs, load average at the end %s.", runtime.NumCPU(), strings.Join(strings.Fields(string(load))[:min(3, len(strings.Fields(string(load))))], " "))
	if note := os.Getenv("CRUCIBLE_CHAOS_NOTE"); note != "" {
		fmt.Fprintf(&b, " %s", note)
	}
	fmt.Fprintf(&b, "\n\n")
	fmt.Fprintf(&b, "| scenario | passed | accepted | completed | duplicated | lost | artifacts stored/pushed | faults |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| %s | %v | %d | %d | %d | %d | %d/%d | %d |\n", r.Scenario, r.Passed, r.Pods.Accepted, r.Pods.Completed,
			r.Pods.Duplicated, r.Pods.Lost, r.Artifacts.Stored, r.Artifacts.Pushed, r.Faults)
	}
	for _, r := range results {
		fmt.Fprintf(&b, "\n## %s\n\n", r.Scenario)
		fmt.Fprintf(&b, "- injected: %s (%d faults, seed %d)\n- load: %s\n- expected: %s\n- happened: %s (%s)\n", r.Injected, r.Faults, r.Seed, r.Load, r.Expected, r.Happened, r.Duration)
		if r.Pods.Submitted == 0 { // no wave: the slow-client check
			fmt.Fprintf(&b, "- requests by status: %s\n", counts(r.Requests))
			for _, pr := range r.Problems {
				fmt.Fprintf(&b, "- problem: %s\n", pr)
			}
			continue
		}
		p := r.Pods
		fmt.Fprintf(&b, "- pods: submitted %d, accepted %d, completed %d, failed %d, duplicated: %d, lost: %d; logs with exactly one run %d; orphans after sweep %d\n",
			p.Submitted, p.Accepted, p.Completed, p.Failed, p.Duplicated, p.Lost, p.LogsWithOneRun, p.OrphansAfter)
		fmt.Fprintf(&b, "- submits: %d got no answer (controller killed mid-request), %d answered other than 201; rows the wave did not take as a pod's ended: %s\n",
			p.Interrupted, p.Resubmitted, counts(p.UnansweredRows))
		if p.Interrupted > 0 || p.Replayed > 0 {
			fmt.Fprintf(&b, "  - every pod's submits carry one Idempotency-Key: %d resends were answered with the row their first send made (Idempotent-Replayed), so a submit cut by a kill never ran as two rows; a row the kill cut before its dispatch is dispatched when the controller is back (startup reconcile), and %d of those rows ended without a pod under their first key (want 0).\n",
				p.Replayed, p.Renewed)
		}
		fmt.Fprintf(&b, "- artifacts: pushed %d, stored %d, lost: %d\n", r.Artifacts.Pushed, r.Artifacts.Stored, r.Artifacts.Lost)
		fmt.Fprintf(&b, "- requests by status: %s\n", counts(r.Requests))
		fmt.Fprintf(&b, "- controller goroutines %d → %d, fds %d → %d; its transient retries (crucible_transient_retries_total) %d → %d\n",
			r.Before.Goroutines, r.After.Goroutines, r.Before.FDs, r.After.FDs, r.Before.Retries, r.After.Retries)
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "- observed: %s\n", n)
		}
		for _, pr := range r.Problems {
			fmt.Fprintf(&b, "- problem: %s\n", pr)
		}
	}
	b.WriteString(notRun())
	return b.String()
}

// issueScenarios are issue 15's scenarios by number, so that the report
// names those this run did not cover (not written yet, or full-only).
var issueScenarios = map[int]string{
	1:  "controller SIGKILLed at random points",
	2:  "a spoke's API server killed and restarted",
	3:  "a spoke unreachable",
	4:  "the hub API down: stale keys within the mirror's bound, then failing closed",
	5:  "the hub signing key rotated while pods are dispatched",
	6:  "token files rotated every few seconds with the old tokens revoked",
	7:  "a spoke's webhook killed and restarted",
	8:  "PostgreSQL restarted under load; SQLite's process killed mid-write",
	9:  "the artifact volume full while pods push",
	10: "HA: the leader killed under load",
	11: "10,000 pushes from 500 pods while one spoke flaps",
	12: "a slow client on each listener",
}

// notRun lists the issue's scenarios without a result in this run.
func notRun() string {
	seen := map[int]bool{}
	for _, r := range results {
		seen[r.Num] = true
	}
	var b strings.Builder
	for n := 1; n <= len(issueScenarios); n++ {
		if !seen[n] {
			fmt.Fprintf(&b, "- %d. %s\n", n, issueScenarios[n])
		}
	}
	if b.Len() == 0 {
		return ""
	}
	return "\n## Not run in this run (issue 15)\n\n" + b.String()
}

func counts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s: %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

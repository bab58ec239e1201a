// Command benchreport runs crucible's benchmarks and writes the report of
// `make bench`: bench/results.md (one row per figure: crucible's, the
// baseline's from the same run, their ratio, the goal, met or not) and
// bench/results.json (the same rows as data).
//
//	go run ./hack/benchreport              every benchmark, a fresh report
//	go run ./hack/benchreport -bench webhook,dropbox
//	                                       only those; their rows replace the
//	                                       previous ones in the report
//	go run ./hack/benchreport -list        the benchmarks, their runs and how each runs
//
// Each benchmark is one `go test -bench` invocation bounded in benchtime
// and timeout, run three times (-count; the longest once) so that a row is
// the median of its runs with their spread (median.go); the Makefile's
// bench comment has what the whole suite takes, and why -budget is 3h30. The
// benchmarks append their rows through internal/benchreport to a records
// file this command names in $CRUCIBLE_BENCH_RECORDS. A benchmark that
// fails leaves its rows marked as not run; figures never fail the run.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"crucible.dev/crucible/internal/benchreport"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("benchreport", flag.ContinueOnError)
	only := fs.String("bench", "", "comma-separated benchmark ids to run (default: all)")
	out := fs.String("out", "bench", "directory of results.md and results.json")
	list := fs.Bool("list", false, "list the benchmarks and exit")
	note := fs.String("note", "", "a line for the report's header (e.g. the machine's load)")
	renderOnly := fs.Bool("render", false, "only rewrite results.md from results.json (and notes.md)")
	budget := fs.Duration("budget", 210*time.Minute, "the whole run's bound: a benchmark that would start with less than its own timeout (every run's) left is skipped")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *list {
		for _, b := range suite {
			fmt.Printf("%-20s %-6s go %s\n", b.ID, plural(b.runs(), "run"), strings.Join(b.args(), " "))
		}
		return nil
	}
	jsonPath := filepath.Join(*out, "results.json")
	if *renderOnly {
		report, err := loadReport(jsonPath)
		if err != nil {
			return err
		}
		return writeMarkdown(*out, report)
	}
	selected, err := selectBenches(*only)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	report := Report{}
	if *only != "" { // keep the rows of benchmarks not rerun
		if report, err = loadReport(jsonPath); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	records, err := os.CreateTemp("", "crucible-bench-*.jsonl")
	if err != nil {
		return err
	}
	records.Close()
	defer os.Remove(records.Name())

	started := time.Now()
	deadline := started.Add(*budget)
	var runs []Run
	for _, b := range selected {
		if left := time.Until(deadline); left < b.bound() {
			fmt.Printf("=== bench %s skipped: %s of the budget left, its %s may take %s\n", b.ID, left.Round(time.Second), plural(b.runs(), "run"), b.bound())
			runs = append(runs, Run{ID: b.ID, Error: "skipped: the run's budget (-budget) was exhausted"})
			continue
		}
		runs = append(runs, b.run(ctx, records.Name()))
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	recs, err := readRecords(records.Name())
	if err != nil {
		return err
	}
	report.merge(selected, runs, recs, started, *note)
	if err := writeJSON(jsonPath, report); err != nil {
		return err
	}
	return writeMarkdown(*out, report)
}

// writeMarkdown writes results.md. notes.md, kept by hand next to the
// report, explains figures that miss their goal (where the time goes); it
// is appended as it is.
func writeMarkdown(dir string, report Report) error {
	md := report.markdown()
	if notes, err := os.ReadFile(filepath.Join(dir, "notes.md")); err == nil {
		md += "\n" + string(notes)
	}
	return os.WriteFile(filepath.Join(dir, "results.md"), []byte(md), 0o644)
}

func selectBenches(only string) ([]Bench, error) {
	if only == "" || only == "all" {
		return runOrder(suite), nil
	}
	var out []Bench
	for id := range strings.SplitSeq(only, ",") {
		b, ok := byID(strings.TrimSpace(id))
		if !ok {
			return nil, fmt.Errorf("unknown benchmark %q (see -list)", id)
		}
		out = append(out, b)
	}
	return runOrder(out), nil
}

// runOrder puts the heavy benchmarks last, keeping the order otherwise.
func runOrder(benches []Bench) []Bench {
	out := slices.Clone(benches)
	slices.SortStableFunc(out, func(a, b Bench) int {
		switch {
		case a.Heavy == b.Heavy:
			return 0
		case a.Heavy:
			return 1
		}
		return -1
	})
	return out
}

// run runs one benchmark's go test, streaming its output.
func (b Bench) run(ctx context.Context, recordsFile string) Run {
	fmt.Printf("=== bench %s: go %s\n", b.ID, strings.Join(b.args(), " "))
	start := time.Now()
	cmd := exec.CommandContext(ctx, "go", b.args()...)
	cmd.Env = append(os.Environ(), benchreport.EnvRecords+"="+recordsFile)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	err := cmd.Run()
	r := Run{ID: b.ID, Seconds: time.Since(start).Seconds(), Count: b.runs(), OK: err == nil}
	if err != nil {
		r.Error = err.Error()
		fmt.Printf("=== bench %s failed after %s: %v\n", b.ID, time.Since(start).Round(time.Second), err)
	}
	return r
}

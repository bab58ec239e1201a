// Package benchreport carries benchmark figures from the benchmarks to the
// report of `make bench` (bench/results.md and bench/results.json, written
// by hack/benchreport). Each benchmark appends one Record per figure to the
// file named by $CRUCIBLE_BENCH_RECORDS; without it, Append does nothing, so
// a plain `go test -bench` only prints its figures. Records never fail a
// build on a figure: whether a goal is met is reported, not enforced.
package benchreport

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"sync"
)

// EnvRecords names the file records are appended to (JSON lines).
const EnvRecords = "CRUCIBLE_BENCH_RECORDS"

// Record is one row of the report: crucible's figure against a baseline
// measured in the same run.
type Record struct {
	// ID is the benchmark's row id in issue 14's table: webhook,
	// webhook-handler, dropbox, flood, dispatch, reconcile, fanout, store, api,
	// ui; and issue 23's abuse.
	ID string `json:"id"`
	// Case tells rows of one id apart ("distinct tokens", "sqlite inserts").
	Case string `json:"case,omitempty"`
	// Unit of Value and Baseline ("req/s", "µs/review").
	Unit string `json:"unit"`
	// Value is crucible's figure.
	Value float64 `json:"value"`
	// BaselineName says what the baseline is; empty when there is none.
	BaselineName string `json:"baseline_name,omitempty"`
	// Baseline is the baseline's figure in the same run.
	Baseline float64 `json:"baseline,omitempty"`
	// Ratio is Value/Baseline for rates (higher is better) or, when
	// LowerIsBetter, Baseline/Value; 0 without a baseline.
	Ratio float64 `json:"ratio,omitempty"`
	// LowerIsBetter marks times and costs.
	LowerIsBetter bool `json:"lower_is_better,omitempty"`
	// Goal is the goal for this row, in words.
	Goal string `json:"goal"`
	// Met says whether the goal is met; nil for rows that only report.
	Met *bool `json:"met,omitempty"`
	// Extra holds further figures (p99, RSS, allocations...).
	Extra map[string]float64 `json:"extra,omitempty"`
	// Method says how it was measured: concurrency, counts, versions.
	Method string `json:"method"`
	// GoVersion and CPUs are filled in by Append.
	GoVersion string `json:"go_version"`
	CPUs      int    `json:"cpus"`
}

// WithBaseline sets the baseline and the ratio.
func (r Record) WithBaseline(name string, baseline float64) Record {
	r.BaselineName, r.Baseline = name, baseline
	switch {
	case baseline == 0 || r.Value == 0:
		r.Ratio = 0
	case r.LowerIsBetter:
		r.Ratio = baseline / r.Value
	default:
		r.Ratio = r.Value / baseline
	}
	return r
}

// Judged sets Met.
func (r Record) Judged(met bool) Record {
	r.Met = &met
	return r
}

var mu sync.Mutex

// Append writes r to $CRUCIBLE_BENCH_RECORDS, if set.
func Append(r Record) error {
	path := os.Getenv(EnvRecords)
	if path == "" {
		return nil
	}
	r.GoVersion, r.CPUs = runtime.Version(), runtime.NumCPU()
	line, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode bench record %s: %w", r.ID, err)
	}
	mu.Lock()
	defer mu.Unlock()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("open bench records: %w", err)
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("write bench record %s: %w", r.ID, err)
	}
	return f.Close()
}

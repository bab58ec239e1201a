package main

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"crucible.dev/crucible/internal/benchreport"
)

// rate is a higher-is-better row of one run: value against baseline 100,
// judged by the ratio as the benchmarks do.
func rate(c string, value float64) benchreport.Record {
	r := benchreport.Record{ID: "webhook", Case: c, Unit: "req/s", Value: value, Goal: "≥ 0.9×", Method: "run at " + num(value)}.WithBaseline("null webhook", 100)
	return r.Judged(r.Ratio >= 0.9)
}

// cost is a lower-is-better row of one run against a 30 µs baseline.
func cost(us float64) benchreport.Record {
	return benchreport.Record{ID: "webhook-handler", Case: "distinct tokens", Unit: "µs/review", Value: us, LowerIsBetter: true}.WithBaseline("verify alone", 30)
}

// reported is a row without a baseline.
func reported(v float64, lowerIsBetter bool) benchreport.Record {
	return benchreport.Record{ID: "api", Case: "first page", Unit: "ms", Value: v, LowerIsBetter: lowerIsBetter, Goal: "report"}
}

func TestMedianRow(t *testing.T) {
	tests := []struct {
		name   string
		runs   []benchreport.Record
		wanted int
		// median is the index in runs of the record the row must show.
		median int
		spread Spread
	}{{
		name: "odd count: the middle ratio, met read from it",
		runs: []benchreport.Record{rate("d", 89), rate("d", 78), rate("d", 91)}, wanted: 3, median: 0,
		spread: Spread{Of: "ratio", Min: 0.78, Median: 0.89, Max: 0.91, Runs: 3, Wanted: 3},
	}, {
		name: "even count: the worse of the two middle runs",
		runs: []benchreport.Record{rate("d", 80), rate("d", 90), rate("d", 70), rate("d", 100)}, wanted: 4, median: 0,
		spread: Spread{Of: "ratio", Min: 0.7, Median: 0.8, Max: 1, Runs: 4, Wanted: 4},
	}, {
		name: "two runs: the worse one",
		runs: []benchreport.Record{rate("d", 95), rate("d", 85)}, wanted: 3, median: 1,
		spread: Spread{Of: "ratio", Min: 0.85, Median: 0.85, Max: 0.95, Runs: 2, Wanted: 3},
	}, {
		// WithBaseline inverts a cost, so the slowest run has the lowest
		// ratio: 60 µs is the median of 50, 60 and 75 µs.
		name: "lower is better: ranked by the inverted ratio",
		runs: []benchreport.Record{cost(75), cost(50), cost(60)}, wanted: 3, median: 2,
		spread: Spread{Of: "ratio", Min: 0.4, Median: 0.5, Max: 0.6, Runs: 3, Wanted: 3},
	}, {
		name: "report only: the median value",
		runs: []benchreport.Record{reported(5, false), reported(3, false), reported(9, false)}, wanted: 3, median: 0,
		spread: Spread{Of: "value", Min: 3, Median: 5, Max: 9, Runs: 3, Wanted: 3},
	}, {
		name: "report only, lower is better, even: the slower middle run",
		runs: []benchreport.Record{reported(10, true), reported(40, true), reported(20, true), reported(30, true)}, wanted: 4, median: 3,
		spread: Spread{Of: "value", Min: 10, Median: 30, Max: 40, Runs: 4, Wanted: 4},
	}, {
		name: "one run",
		runs: []benchreport.Record{rate("d", 89)}, wanted: 1, median: 0,
		spread: Spread{Of: "ratio", Min: 0.89, Median: 0.89, Max: 0.89, Runs: 1, Wanted: 1},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := Row{Record: tt.runs[tt.median], Spread: &tt.spread}
			if diff := cmp.Diff(want, medianRow(tt.runs, tt.wanted)); diff != "" {
				t.Errorf("row (-want +got):\n%s", diff)
			}
		})
	}
}

// TestMedianReadsMet: met is the median run's even when the best run met
// the goal and the median did not.
func TestMedianReadsMet(t *testing.T) {
	row := medianRow([]benchreport.Record{rate("d", 95), rate("d", 85), rate("d", 80)}, 3)
	if row.Met == nil || *row.Met || row.Value != 85 {
		t.Errorf("median row = %+v, want the 85 req/s run, not met", row.Record)
	}
}

func TestMedianRowsGroupsByIDAndCase(t *testing.T) {
	// Three runs of one benchmark writing two cases, then one of another.
	recs := []benchreport.Record{
		rate("distinct", 89), rate("repeated", 86),
		rate("distinct", 78), rate("repeated", 90),
		rate("distinct", 91),
		cost(60),
	}
	wanted := map[string]int{"webhook": 3, "webhook-handler": 1}
	var got []string
	for _, r := range medianRows(recs, func(id string) int { return wanted[id] }) {
		got = append(got, r.ID+"/"+r.Case+": "+spreadCell(r))
	}
	want := []string{
		"webhook/distinct: 0.78–0.91× (3 runs)",
		"webhook/repeated: 0.86–0.90× (2 of 3 runs)",
		"webhook-handler/distinct tokens: 1 run",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
}

func TestSpreadCell(t *testing.T) {
	tests := []struct {
		name string
		row  Row
		want string
	}{
		{"no spread (placeholder, older report)", Row{Record: benchreport.Record{Unit: "req/s"}}, "—"},
		{"ratio", Row{Spread: &Spread{Of: "ratio", Min: 0.78, Max: 0.912, Runs: 3, Wanted: 3}}, "0.78–0.91× (3 runs)"},
		{"a run missing", Row{Spread: &Spread{Of: "ratio", Min: 0.78, Max: 0.91, Runs: 2, Wanted: 3}}, "0.78–0.91× (2 of 3 runs)"},
		{"one of three", Row{Spread: &Spread{Of: "ratio", Min: 0.8, Max: 0.8, Runs: 1, Wanted: 3}}, "1 of 3 runs"},
		{"one run asked", Row{Spread: &Spread{Of: "ratio", Min: 0.8, Max: 0.8, Runs: 1, Wanted: 1}}, "1 run"},
		{"value", Row{Record: benchreport.Record{Unit: "ms"}, Spread: &Spread{Of: "value", Min: 412, Max: 530.4, Runs: 3, Wanted: 3}}, "412–530 ms (3 runs)"},
		{"value without a unit (skipped)", Row{Spread: &Spread{Of: "value", Runs: 3, Wanted: 3}}, "3 runs"},
		{"written twice a run", Row{Spread: &Spread{Of: "ratio", Min: 0.8, Max: 0.9, Runs: 2, Wanted: 1}}, "0.80–0.90× (2 records in 1 run)"},
	}
	for _, tt := range tests {
		if got := spreadCell(tt.row); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestMergeRepeatedRuns: the rows of a benchmark run three times are its
// median runs with their spread, a case one run missed says so, and the
// rows of a benchmark not rerun (-bench webhook) keep their own spread.
func TestMergeRepeatedRuns(t *testing.T) {
	dropbox := Row{Record: benchreport.Record{ID: "dropbox", Case: "4 KiB", Unit: "uploads/s", Value: 295, Ratio: 0.97},
		Spread: &Spread{Of: "ratio", Min: 0.95, Median: 0.97, Max: 0.99, Runs: 3, Wanted: 3}}
	r := Report{Rows: []Row{dropbox}, Runs: []Run{{ID: "dropbox", Seconds: 51, Count: 3, OK: true}}}
	webhook, _ := byID("webhook")
	recs := []benchreport.Record{rate("distinct", 89), rate("repeated", 86), rate("distinct", 78), rate("distinct", 91), rate("repeated", 90)}
	r.merge([]Bench{webhook}, []Run{{ID: "webhook", Seconds: 190, Count: 3, Error: "exit status 1"}}, recs, time.Unix(0, 0), "")

	if i := slices.IndexFunc(r.Rows, func(x Row) bool { return x.ID == "dropbox" }); i < 0 || !cmp.Equal(dropbox, r.Rows[i]) {
		t.Errorf("dropbox row not kept as it was: %+v", r.Rows)
	}
	md := r.markdown()
	for _, want := range []string{
		"| webhook | distinct | 89 req/s | 100 req/s (null webhook) | 0.89× | 0.78–0.91× (3 runs) | ≥ 0.9× | **no** |",
		"| webhook | repeated | 86 req/s | 100 req/s (null webhook) | 0.86× | 0.86–0.90× (2 of 3 runs) | ≥ 0.9× | **no** |",
		"| dropbox | 4 KiB | 295 uploads/s | — | 0.97× | 0.95–0.99× (3 runs) |",
		"| flood |  | — | — | — | — | ",
		"| webhook | 190s (3 runs) | failed: exit status 1 |",
		"- **webhook** (distinct): run at 89\n",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}

// TestReportRoundTrip: results.json keeps the spread beside the record's
// own fields, and a report written before runs were repeated still loads.
func TestReportRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "results.json")
	want := Report{Generated: "g", Machine: "m", Runs: []Run{{ID: "webhook", Seconds: 1, Count: 3, OK: true}},
		Rows: []Row{medianRow([]benchreport.Record{rate("d", 89), rate("d", 78), rate("d", 91)}, 3), {Record: reported(5, false)}}}
	if err := writeJSON(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := loadReport(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
	old, err := loadReport(filepath.Join("..", "..", "bench", "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(old.Rows) == 0 || old.Rows[0].ID == "" || old.Rows[0].Unit == "" {
		t.Errorf("committed report's first row = %+v", old.Rows)
	}
}

// TestRuns: every benchmark runs defaultRuns times but the heavy ones
// that say otherwise, and go test is told the count and every run's bound.
func TestRuns(t *testing.T) {
	for _, b := range suite {
		if b.runs() < defaultRuns && !b.Heavy {
			t.Errorf("light benchmark %s runs %d times, want %d", b.ID, b.runs(), defaultRuns)
		}
	}
	webhook, _ := byID("webhook")
	args := strings.Join(webhook.args(), " ")
	if want := "-count 3 -timeout 24m0s"; !strings.Contains(args, want) {
		t.Errorf("webhook's go test %q lacks %q", args, want)
	}
	reconcile, _ := byID("reconcile")
	if args := strings.Join(reconcile.args(), " "); !strings.Contains(args, "-count 1 -timeout 12m0s") {
		t.Errorf("reconcile's go test %q is not one run bounded by 12 minutes", args)
	}
}

package main

import (
	"cmp"
	"fmt"
	"slices"

	"crucible.dev/crucible/internal/benchreport"
)

// defaultRuns is how many times a benchmark runs unless its Bench says
// otherwise: on a shared 2-core machine one ratio moves by a tenth from run
// to run (webhook read 0.89× and 0.78×), so one sample cannot tell noise
// from a change, and a goal is judged by the median of three.
const defaultRuns = 3

// Row is one row of the report: the record of the run whose figure is the
// median of its (ID, Case) over the benchmark's runs, and the spread of
// that figure. Placeholders (not run) and rows of reports written before
// runs were repeated have no Spread.
type Row struct {
	benchreport.Record
	Spread *Spread `json:"spread,omitempty"`
}

// Spread is how a row's figure moved over the runs.
type Spread struct {
	// Of names the figure the runs are ranked by: "ratio" when a run has
	// one, else "value" (a row that only reports).
	Of     string  `json:"of"`
	Min    float64 `json:"min"`
	Median float64 `json:"median"`
	Max    float64 `json:"max"`
	// Runs is how many records the row was drawn from, Wanted how many
	// runs the benchmark was asked for: fewer records than that mean a run
	// failed or its timeout cut it short.
	Runs   int `json:"runs"`
	Wanted int `json:"wanted"`
}

// medianRows folds the records into one row per (ID, Case), in the order
// each first appears. wanted gives a benchmark's number of runs.
func medianRows(recs []benchreport.Record, wanted func(id string) int) []Row {
	type key struct{ id, c string }
	groups := map[key][]benchreport.Record{}
	var order []key
	for _, r := range recs {
		k := key{r.ID, r.Case}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	rows := make([]Row, 0, len(order))
	for _, k := range order {
		rows = append(rows, medianRow(groups[k], wanted(k.id)))
	}
	return rows
}

// medianRow picks the median run of one row. Runs are ranked by ratio,
// which is higher-is-better for every row (WithBaseline inverts costs and
// times), or, without a ratio, by value in the row's own direction. They
// are ordered worst to best and the median is the ((n-1)/2)th: for an
// even count that is the worse of the two middle runs, so met is never
// read from a run better than half of them. recs is not empty.
func medianRow(recs []benchreport.Record, wanted int) Row {
	s := &Spread{Of: "value", Runs: len(recs), Wanted: wanted}
	figure := func(r benchreport.Record) float64 { return r.Value }
	worseFirst := func(a, b benchreport.Record) int { return cmp.Compare(a.Value, b.Value) }
	if recs[0].LowerIsBetter {
		worseFirst = func(a, b benchreport.Record) int { return cmp.Compare(b.Value, a.Value) }
	}
	if slices.ContainsFunc(recs, func(r benchreport.Record) bool { return r.Ratio != 0 }) {
		s.Of = "ratio"
		figure = func(r benchreport.Record) float64 { return r.Ratio }
		worseFirst = func(a, b benchreport.Record) int { return cmp.Compare(a.Ratio, b.Ratio) }
	}
	ranked := slices.Clone(recs)
	slices.SortStableFunc(ranked, worseFirst)
	mid := ranked[(len(ranked)-1)/2]
	s.Median = figure(mid)
	s.Min, s.Max = s.Median, s.Median
	for _, r := range recs {
		s.Min, s.Max = min(s.Min, figure(r)), max(s.Max, figure(r))
	}
	return Row{Record: mid, Spread: s}
}

// spreadCell renders a row's spread: "0.78–0.91× (3 runs)", for a row that
// only reports "412–530 ms (3 runs)", and says so when runs are missing.
func spreadCell(r Row) string {
	s := r.Spread
	if s == nil {
		return "—"
	}
	runs := plural(s.Runs, "run")
	switch {
	case s.Runs < s.Wanted:
		runs = fmt.Sprintf("%d of %d runs", s.Runs, s.Wanted)
	case s.Wanted > 0 && s.Runs > s.Wanted: // a benchmark wrote the row twice in a run
		runs = fmt.Sprintf("%s in %s", plural(s.Runs, "record"), plural(s.Wanted, "run"))
	}
	switch {
	case s.Runs < 2 || s.Of == "value" && r.Unit == "":
		return runs
	case s.Of == "ratio":
		return fmt.Sprintf("%.2f–%.2f× (%s)", s.Min, s.Max, runs)
	default:
		return fmt.Sprintf("%s–%s %s (%s)", num(s.Min), num(s.Max), r.Unit, runs)
	}
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

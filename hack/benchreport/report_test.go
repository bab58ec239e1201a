package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"crucible.dev/crucible/internal/benchreport"
)

// TestMergeReplacesOnlyRerunRows: rerunning one benchmark replaces its rows
// and run, keeps the others, and every benchmark of the suite has a row.
func TestMergeReplacesOnlyRerunRows(t *testing.T) {
	r := Report{
		Rows: []Row{{Record: benchreport.Record{ID: "dropbox", Value: 1, Unit: "uploads/s"}}, {Record: benchreport.Record{ID: "webhook", Case: "old", Value: 1, Unit: "req/s"}}},
		Runs: []Run{{ID: "dropbox", OK: true}, {ID: "webhook", OK: true}},
	}
	webhook, _ := byID("webhook")
	fresh := benchreport.Record{ID: "webhook", Case: "new | piped", Value: 2, Unit: "req/s", Goal: "≥ 0.9×"}.WithBaseline("null", 4).Judged(false)
	r.merge([]Bench{webhook}, []Run{{ID: "webhook", OK: true}}, []benchreport.Record{fresh}, time.Unix(0, 0), "noisy")

	ids := map[string]int{}
	for _, row := range r.Rows {
		ids[row.ID]++
		if row.ID == "webhook" && row.Case != "new | piped" {
			t.Errorf("stale webhook row kept: %+v", row)
		}
	}
	if ids["dropbox"] != 1 || ids["webhook"] != 1 {
		t.Errorf("rows per id = %v, want the old dropbox row and the new webhook row", ids)
	}
	for _, b := range suite {
		if ids[b.ID] == 0 {
			t.Errorf("no row for %s", b.ID)
		}
	}
	if r.Rows[0].ID != suite[0].ID {
		t.Errorf("rows not in suite order: first is %s", r.Rows[0].ID)
	}
	md := r.markdown()
	for _, want := range []string{"> noisy", `new \| piped`, "0.50×", "**no**", "not run: not in this run"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}

// TestMergeShowsMissingCases: a benchmark of several sizes that wrote one
// row gets a placeholder for each size it did not reach.
func TestMergeShowsMissingCases(t *testing.T) {
	reconcile, _ := byID("reconcile")
	if len(reconcile.Cases) != 2 {
		t.Fatalf("reconcile cases %v, want the 10k and the 100k rows", reconcile.Cases)
	}
	var r Report
	small := benchreport.Record{ID: "reconcile", Case: reconcile.Cases[0], Value: 1, Unit: "s"}
	r.merge([]Bench{reconcile}, []Run{{ID: "reconcile", Error: "exit status 1"}}, []benchreport.Record{small}, time.Unix(0, 0), "")
	var got []string
	for _, row := range r.Rows {
		if row.ID == "reconcile" {
			got = append(got, row.Case+": "+row.Method)
		}
	}
	want := []string{reconcile.Cases[0] + ": ", reconcile.Cases[1] + ": not run: failed: exit status 1"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("reconcile rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestReadRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.jsonl")
	if err := os.WriteFile(path, []byte(`{"id":"flood","value":0,"unit":"TokenReviews"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	recs, err := readRecords(path)
	if err != nil || len(recs) != 1 || recs[0].ID != "flood" {
		t.Fatalf("readRecords = %+v, %v", recs, err)
	}
	if err := os.WriteFile(path, []byte("{\"id\":\"flood\"}\nnot json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readRecords(path); err == nil {
		t.Error("a malformed record was accepted")
	}
}

func TestSelectBenches(t *testing.T) {
	if got, err := selectBenches(""); err != nil || len(got) != len(suite) {
		t.Errorf("all: %d, %v", len(got), err)
	}
	if got, err := selectBenches("webhook, flood"); err != nil || len(got) != 2 || got[1].ID != "flood" {
		t.Errorf("two: %+v, %v", got, err)
	}
	all, _ := selectBenches("")
	var heavySeen bool
	for _, b := range all {
		if heavySeen && !b.Heavy {
			t.Errorf("light benchmark %s runs after a heavy one", b.ID)
		}
		heavySeen = heavySeen || b.Heavy
	}
	if !heavySeen {
		t.Error("no heavy benchmark in the suite")
	}
	if got, _ := selectBenches("reconcile,store"); len(got) != 2 || got[0].ID != "store" {
		t.Errorf("reconcile,store run as %+v, want store first", got)
	}
	if _, err := selectBenches("webhook,nosuch"); err == nil {
		t.Error("an unknown benchmark was accepted")
	}
}

// TestMachineNamesTheProcessor: the machine line gives the model of the
// cpuinfo file's first processor, and leaves it out when the file has
// none or is missing.
func TestMachineNamesTheProcessor(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	tests := []struct{ path, want string }{
		{write("two", "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9R14\nprocessor\t: 1\nmodel name\t: other\n"), "AMD EPYC 9R14"},
		{write("arm", "processor\t: 0\nBogoMIPS\t: 50.00\n"), ""},
		{write("empty", ""), ""},
		{filepath.Join(dir, "missing"), ""},
	}
	for _, tt := range tests {
		if got := cpuModel(tt.path); got != tt.want {
			t.Errorf("cpuModel(%s) = %q, want %q", filepath.Base(tt.path), got, tt.want)
		}
	}
	if got := machine("AMD EPYC 9R14"); !strings.Contains(got, " CPUs (AMD EPYC 9R14), go") {
		t.Errorf("machine = %q", got)
	}
	if got := machine(""); strings.Contains(got, "(") {
		t.Errorf("machine without a model = %q", got)
	}
}

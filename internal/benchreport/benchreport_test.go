package benchreport

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestAppend(t *testing.T) {
	path := filepath.Join(t.TempDir(), "records.jsonl")
	t.Setenv(EnvRecords, path)
	rate := Record{ID: "webhook", Case: "distinct", Unit: "req/s", Value: 900, Goal: "≥ 0.9×"}.WithBaseline("null webhook", 1000).Judged(true)
	cost := Record{ID: "webhook-handler", Unit: "µs/review", Value: 50, LowerIsBetter: true}.WithBaseline("verify alone", 25)
	for _, r := range []Record{rate, cost} {
		if err := Append(r); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got []Record
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		got = append(got, r)
	}
	if len(got) != 2 || got[0].Ratio != 0.9 || got[1].Ratio != 0.5 || got[0].Met == nil || !*got[0].Met || got[1].Met != nil || got[0].GoVersion == "" {
		t.Errorf("records = %+v", got)
	}
	if diff := cmp.Diff("null webhook", got[0].BaselineName); diff != "" {
		t.Error(diff)
	}
}

func TestAppendWithoutFileIsQuiet(t *testing.T) {
	t.Setenv(EnvRecords, "")
	if err := Append(Record{ID: "x"}); err != nil {
		t.Fatal(err)
	}
}

func TestAppendUnwritable(t *testing.T) {
	t.Setenv(EnvRecords, filepath.Join(t.TempDir(), "no", "such", "dir", "r.jsonl"))
	if err := Append(Record{ID: "x"}); err == nil {
		t.Fatal("Append to an unwritable path succeeded")
	}
}

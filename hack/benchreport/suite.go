package main

import (
	"fmt"
	"strconv"
	"time"
)

// Bench is one benchmark of the suite: a go test invocation bounded in
// time and count, and the report rows (ids) it writes.
type Bench struct {
	ID        string
	Package   string
	Pattern   string        // -bench
	BenchTime string        // -benchtime: a time, or Nx for a fixed count
	Timeout   time.Duration // one run's bound; go test's -timeout is Runs times it
	What      string        // the row, for the report
	// Runs is go test's -count, 0 meaning defaultRuns: each run calls the
	// benchmark function once, which measures crucible and its baseline
	// together, and the report shows the median run. The heavy ones that
	// only report, and placement-quality, run once (the Makefile's bench
	// comment has the arithmetic).
	Runs int
	// Cases are the rows a benchmark of several sizes must write; a run
	// that wrote only some gets a placeholder for the others.
	Cases []string
	// Heavy benchmarks run after all the others, so the budget's cut
	// (-budget) can only fall on them, never on a light row behind them.
	Heavy bool
	// Tags are go build tags the package's benchmark needs (interop: Kueue).
	Tags string
}

func (b Bench) runs() int {
	if b.Runs > 0 {
		return b.Runs
	}
	return defaultRuns
}

// bound is the whole go test's timeout, every run's.
func (b Bench) bound() time.Duration { return b.Timeout * time.Duration(b.runs()) }

func (b Bench) args() []string {
	args := []string{"test", "-run", "^$", "-bench", b.Pattern, "-benchtime", b.BenchTime,
		"-count", strconv.Itoa(b.runs()), "-timeout", b.bound().String()}
	if b.Tags != "" {
		args = append(args, "-tags", b.Tags)
	}
	return append(args, b.Package)
}

// suite is every benchmark of issue 14, issue 23's abuse, issue 24's
// runlive, issue 25's multikueue and issue 39's placement, in report
// order (they run in this order too, the heavy ones last). Each run is
// bounded by its timeout; a full run takes far less than the bounds' sum,
// and -budget cuts it (see the Makefile's bench comment). The e2e ones
// start their own devstack (hub and spokes) in every run, which is most of
// the light ones' time; the heavy ones spend theirs creating 10,000 and
// 100,000 pods.
var suite = []Bench{
	{ID: "webhook-handler", Package: "./internal/webhook", Pattern: "^BenchmarkReviewReport$", BenchTime: "2s", Timeout: 2 * time.Minute,
		What: "µs, B and allocs per review in the handler, distinct tokens, vs the signature check alone"},
	{ID: "webhook", Package: "./test/e2e", Pattern: "^BenchmarkAuthnWebhookVsBuiltin$", BenchTime: "1x", Timeout: 8 * time.Minute,
		What: "req/s and p99 through a spoke via the webhook vs a webhook judging with the library alone, a null webhook and kube-apiserver's built-in JWT path"},
	{ID: "dropbox", Package: "./internal/ingest", Pattern: "^BenchmarkUpload4KiBWarm$", BenchTime: "2000x", Timeout: 2 * time.Minute,
		What: "accepted 4 KiB uploads/s, warm caches, vs the same server with auth off"},
	{ID: "flood", Package: "./internal/ingest", Pattern: "^BenchmarkFlood$", BenchTime: "1x", Timeout: 2 * time.Minute,
		What: "TokenReviews per 10,000 requests: forged / one rejected token / 100 valid tokens"},
	{ID: "dispatch", Package: "./test/e2e", Pattern: "^BenchmarkDispatch(1000|10000)$", BenchTime: "1x", Timeout: 20 * time.Minute,
		What: "1,000 (run to the end) and 10,000 (held unscheduled) turn pods over 2 spokes vs a raw client-go create loop; " +
			"the floor (the same submits to a service recording, creating and watching with crucible's libraries alone, and at 1,000 collecting each pod's log and deleting it) takes turns in the same run",
		Cases: []string{"1000 turn pods", "1000 turn pods ÷ the floor", "1000 turn pods: the floor ÷ raw (reported)",
			"10000 turn pods", "10000 turn pods ÷ the floor", "10000 turn pods: the floor ÷ raw (reported)"}, Heavy: true},
	{ID: "fleet", Package: "./test/e2e", Pattern: "^BenchmarkFleet$", BenchTime: "1x", Timeout: 20 * time.Minute,
		What:  "10,000 turn pods (held unscheduled) over 10 spokes from one controller vs a raw client-go create loop over the same spokes; RSS per spoke; an 11th spoke added by a reload to its first pod",
		Cases: []string{"10000 turn pods over 10 spokes"}, Heavy: true},
	{ID: "fleet-100", Package: "./test/e2e", Pattern: "^BenchmarkFleet100$", BenchTime: "1x", Timeout: 12 * time.Minute,
		What:  "10,000 turn pods (held unscheduled) over 100 spokes (25 on each of 4 API servers) from one controller vs a raw client-go create loop over the same spokes; RSS and goroutines per spoke; 99 spokes added by one reload to a pod on each",
		Cases: []string{"10000 turn pods over 100 spokes"}, Heavy: true},
	{ID: "fleet-replicas", Package: "./test/e2e", Pattern: "^BenchmarkFleetReplicas$", BenchTime: "1x", Timeout: 15 * time.Minute,
		What:  "4,000 turn pods (held unscheduled) over 10 spokes: three sharded replicas on PostgreSQL vs one replica holding every spoke",
		Cases: []string{"4000 turn pods over 10 spokes, 3 sharded replicas vs 1"}, Heavy: true},
	{ID: "reconcile", Package: "./test/e2e", Pattern: "^BenchmarkStartupReconcile(10k|100k)$", BenchTime: "1x", Timeout: 12 * time.Minute, Runs: 1,
		What:  "startup with 10,000 and 100,000 rows and pods over 2 spokes: time, LISTs, RSS",
		Cases: []string{"10000 rows and pods over 2 spokes", "100000 rows and pods over 2 spokes"}, Heavy: true},
	{ID: "fanout", Package: "./test/e2e", Pattern: "^BenchmarkFanout", BenchTime: "1x", Timeout: 4 * time.Minute,
		What: "1 pod, 500 SSE viewers vs a viewer reading pods/log directly"},
	{ID: "store", Package: "./internal/store", Pattern: "^BenchmarkStoreVsRawSQL$", BenchTime: "1x", Timeout: 2 * time.Minute,
		What: "work-pod inserts and state updates per second vs raw SQL on the same database"},
	{ID: "api", Package: "./test/e2e", Pattern: "^BenchmarkAPIPodsFirstPage$", BenchTime: "1x", Timeout: 4 * time.Minute,
		What: "GET /api/pods first page with 100,000 rows: latency and RSS"},
	{ID: "abuse", Package: "./test/e2e", Pattern: "^BenchmarkAbuse$", BenchTime: "1x", Timeout: 6 * time.Minute,
		What: "controller RSS and another pod's viewers' p99 while one pod prints 64 KiB lines to 100 slow viewers, vs a well-behaved pod",
		Cases: []string{"controller RSS peak, 64 KiB lines to 100 slow viewers", "another pod's viewers, p99 delivery latency",
			"another pod's viewers, p99 ÷ the same flood unviewed (the floor)"}},
	{ID: "runlive", Package: "./test/e2e", Pattern: "^BenchmarkRunLive$", BenchTime: "1x", Timeout: 6 * time.Minute,
		What:  "crucible port-forward through the controller vs kubectl port-forward straight to the spoke with the same identity: MB/s, 1 KiB echo p99, RSS with 100 idle sessions",
		Cases: []string{"throughput, 64 MiB echoed", "1 KiB echo round trip, p99", "controller RSS, 100 idle sessions"}},
	{ID: "multikueue", Package: "./test/e2e", Pattern: "^BenchmarkMultiKueue$", BenchTime: "1x", Timeout: 25 * time.Minute, Tags: "interop", Runs: 1,
		What: "200 one-second batch pods over 2 spokes: Kueue's MultiKueue through crucible's federation vs crucible's own submit, pods/s until all completed", Heavy: true},
	{ID: "placement", Package: "./internal/capacity", Pattern: "^BenchmarkPlacementReport$", BenchTime: "1x", Timeout: 4 * time.Minute,
		What:  "one placement decision over 100 spokes × 1,000 nodes in process (every view's Judge and Decide); the view's memory per node and per pod",
		Cases: []string{"decision, 100 spokes × 1,000 nodes", "view memory per node", "view memory per pod"}},
	{ID: "placement-quality", Package: "./test/e2e", Pattern: "^BenchmarkPlacementQuality$", BenchTime: "1x", Timeout: 15 * time.Minute, Runs: 1,
		What: "200 GPU pods (1, 2, 4 GPUs, 2–8 s, 1.2× the fleet's GPUs) over spokes of 4, 8 and 8 GPUs beside another tenant's pods: " +
			"GPU occupancy and mean wait of crucible's placement vs an offline oracle (greedy list scheduling, perfect knowledge); round-robin pinned submits reported",
		Cases: []string{"GPU occupancy, crucible placement (cluster auto)", "mean wait, crucible placement (cluster auto)",
			"GPU occupancy, round-robin pinned submits (reported)", "mean wait, round-robin pinned submits (reported)"}, Heavy: true},
	{ID: "placement-multikueue", Package: "./test/e2e", Pattern: "^BenchmarkPlacementMultiKueue$", BenchTime: "1x", Timeout: 15 * time.Minute, Tags: "interop", Runs: 1,
		What:  "placement-quality's stream through Kueue's MultiKueue (a ClusterQueue per spoke holding its GPUs): GPU occupancy and mean wait vs the same oracle",
		Cases: []string{"GPU occupancy, Kueue MultiKueue (reported)", "mean wait, Kueue MultiKueue (reported)"}, Heavy: true},
	{ID: "ui", Package: "./test/ui", Pattern: "^BenchmarkUIFirstPage$", BenchTime: "3x", Timeout: 4 * time.Minute,
		What: "headless chromium: the pod list's first page over 10,000 rows, a 100,000-line log (skipped without chromium)"},
}

func byID(id string) (Bench, bool) {
	for _, b := range suite {
		if b.ID == id {
			return b, true
		}
	}
	return Bench{}, false
}

// goals are the goals per id, shown for rows a benchmark did not
// write (not run, or failed).
var goals = map[string]string{
	"webhook":              "≥ 0.95× the library webhook (distinct), ≥ 0.9× the null webhook (repeated)",
	"webhook-handler":      "≤ 60 µs and ≤ 100 allocs",
	"dropbox":              "≥ 0.9×",
	"flood":                "0 / ≤ 1 per TTL / ≤ 100",
	"dispatch":             "≥ 0.95×, RSS ≤ 150 MB (the floor: ≥ 0.95×)",
	"fleet":                "≥ 0.9×, RSS ≤ 15 MiB a spoke beyond the first",
	"fleet-100":            "≥ 0.9×, RSS ≤ 1 MiB a spoke beyond the first",
	"fleet-replicas":       "report the scaling",
	"reconcile":            "LISTs = 0 beyond the watch, RSS ≤ 300 MB at 100k",
	"fanout":               "1 upstream stream",
	"store":                "≥ 0.8×",
	"api":                  "report",
	"abuse":                "RSS ≤ 1.5× the well-behaved run, p99 ≤ 1.5× the same flood unviewed",
	"runlive":              "≥ 0.8× throughput, p99 ≤ 1.5× (kubectl port-forward)",
	"multikueue":           "report",
	"ui":                   "report",
	"placement":            "report",
	"placement-quality":    "occupancy ≥ 0.9× the oracle's, mean wait ≤ 1.2× the oracle's",
	"placement-multikueue": "report",
}

func init() {
	for _, b := range suite {
		if _, ok := goals[b.ID]; !ok {
			panic(fmt.Sprintf("bench %s has no goal", b.ID))
		}
	}
}

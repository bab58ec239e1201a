package ui

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"crucible.dev/crucible/internal/api"
	"crucible.dev/crucible/internal/artifact"
	"crucible.dev/crucible/internal/benchreport"
	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/store"
	"crucible.dev/crucible/internal/store/storetest"
	"crucible.dev/crucible/internal/ui"
)

const (
	benchRows     = 10_000
	benchLogLines = 100_000
)

// benchServer is the controller's internal listener in-process (API with
// auth "none" and the UI) on a real SQLite store holding benchRows work
// pods, the newest of which has a stored log of benchLogLines lines. No
// spoke is needed: a finished pod's log is replayed from its artifact.
func benchServer(b *testing.B) (url, logPod string) {
	b.Helper()
	st := storetest.SQLite(b)
	exit := int32(0)
	for i := range benchRows {
		_, err := st.CreateWorkPod(b.Context(), store.WorkPod{ID: fmt.Sprintf("turn-bench%05d", i), Cluster: []string{"wharf", "dock"}[i%2],
			Namespace: "loops", Kind: "turn", State: store.StateSucceeded, ExitCode: &exit, Submitter: "bench", Spec: []byte(`{"image":"busybox"}`)})
		if err != nil {
			b.Fatal(err)
		}
	}
	logPod = fmt.Sprintf("turn-bench%05d", benchRows-1)
	arts := artifact.Dir{Root: b.TempDir()}
	pr, pw := io.Pipe()
	go func() {
		for i := 1; i <= benchLogLines; i++ {
			_, _ = fmt.Fprintf(pw, "step %d: loss=%.6f lr=3e-4 tokens=%d some more text so the line is of a typical length\n", i, 1/float64(i), i*512)
		}
		_ = pw.Close()
	}()
	w, err := arts.Write(b.Context(), logPod, artifact.LogKind, pr, 1<<30)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := st.PutArtifact(b.Context(), store.Artifact{PodID: logPod, Kind: artifact.LogKind, Size: w.Size, SHA256: w.SHA256,
		Source: store.SourceController}, store.Quota{}); err != nil {
		b.Fatal(err)
	}
	if _, err := st.UpdateWorkPod(b.Context(), logPod, func(p *store.WorkPod) error { p.LogCollected = true; return nil }); err != nil {
		b.Fatal(err)
	}
	// Every default, as a profile file would have them: a zero [live] or
	// [events] cap refuses every stream.
	prof := profile.Default()
	prof.DefaultCluster, prof.Clusters = "wharf", []profile.ClusterEntry{{Name: "wharf"}, {Name: "dock"}}
	s := api.New(api.Options{
		Profile: profile.NewCurrent(&prof),
		Store:   st, Artifacts: arts, Log: slog.New(slog.DiscardHandler), MaxRequestBytes: 1 << 20,
		AllowedHosts: profile.DefaultAPIAllowedHosts(), PageSize: profile.DefaultAPIPageSize,
	})
	mux := http.NewServeMux()
	s.Routes(mux)
	ui.Routes(mux)
	srv := httptest.NewServer(mux)
	b.Cleanup(srv.Close)
	return srv.URL, logPod
}

// untilMs resolves, in the page, to performance.now() (ms since the
// navigation started) at the first animation frame on which cond holds.
func untilMs(cond string) string {
	return `new Promise(res => { const check = () => { if (` + cond + `) res(performance.now()); else requestAnimationFrame(check); }; check(); })`
}

// BenchmarkUIFirstPage reports, in headless chromium, the time from
// navigation to the first rendered page of the pod list with 10,000 rows,
// and to the first and to all lines of a pod whose log has 100,000 lines
// (plus a search through them). Reported, not asserted; as a row of `make
// bench` it is the best of its iterations. Without chromium the row says
// so and the benchmark is skipped.
func BenchmarkUIFirstPage(b *testing.B) {
	if _, err := exec.LookPath("chromium"); err != nil {
		if _, err2 := exec.LookPath("chromium-browser"); err2 != nil {
			const why = "skipped: chromium is not installed (.ci/install-chromium.sh)"
			if err := benchreport.Append(benchreport.Record{ID: "ui", Case: "pod list first page, 10,000 rows", Goal: "report", Method: why}); err != nil {
				b.Fatal(err)
			}
			b.Skip(why)
		}
	}
	url, logPod := benchServer(b)
	br := newBrowser(b, b.TempDir())
	version := br.version(b)
	best := map[string]float64{}
	keep := func(name string, ms float64) {
		b.ReportMetric(ms, name)
		if old, ok := best[name]; !ok || ms < old {
			best[name] = ms
		}
	}
	for b.Loop() {
		tab := br.tab(b)
		run(b, tab, "open the pod list", chromedp.Navigate(url+"/#/pods"))
		keep("list-first-page-ms", eval[float64](b, tab, untilMs(`document.querySelectorAll('#pod-rows tr').length >= 50`)))

		logTab := br.tab(b)
		run(b, logTab, "open the pod", chromedp.Navigate(url+"/#/pods/"+logPod))
		keep("log-first-lines-ms", eval[float64](b, logTab, untilMs(`document.querySelectorAll('#log .logline').length > 0`)))
		keep("log-all-lines-ms", eval[float64](b, logTab, untilMs(fmt.Sprintf(`(document.getElementById('log-status')||{}).textContent === '%d lines'`, benchLogLines))))
		ms := eval[float64](b, logTab, `(() => { const s = document.getElementById('log-search'); const t0 = performance.now();
			s.value = 'step 99999:'; s.dispatchEvent(new Event('input'));
			return new Promise(res => requestAnimationFrame(() => res(performance.now() - t0))); })()`)
		if got := eval[string](b, logTab, `document.getElementById('log-status').textContent`); !strings.HasPrefix(got, "1 of ") {
			b.Fatalf("search: %q", got)
		}
		keep("log-search-ms", ms)
		// Close both tabs: their event and log streams would otherwise
		// stay open and, past the browser's six connections per host,
		// stall the next iteration's requests.
		for _, t := range []context.Context{tab, logTab} {
			if err := chromedp.Cancel(t); err != nil {
				b.Fatal(err)
			}
		}
	}
	rec := benchreport.Record{ID: "ui", Case: fmt.Sprintf("pod list first page, %d rows", benchRows), Unit: "ms", Value: best["list-first-page-ms"], Goal: "report",
		Extra: map[string]float64{"log_first_lines_ms": best["log-first-lines-ms"], "log_all_lines_ms": best["log-all-lines-ms"], "log_search_ms": best["log-search-ms"]},
		Method: fmt.Sprintf("headless chromium (%s), a new tab per iteration (%d), best kept: navigation to the first 50 rows of the pod list rendered over %d rows in SQLite "+
			"(controller API and UI in process, auth none); the same for a pod's log of %d lines (first lines, all lines, a search)", version, b.N, benchRows, benchLogLines)}
	if err := benchreport.Append(rec); err != nil {
		b.Fatal(err)
	}
}

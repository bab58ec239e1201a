package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// axeVersion is the axe-core the UI is checked with (.ci/install-chromium.sh
// caches the same one).
const axeVersion = "4.14.1"

// chromiumPath finds Debian's chromium. Missing, it skips under -short and
// otherwise fails saying what to install.
func chromiumPath(tb testing.TB) string {
	tb.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	const msg = "chromium is not installed: run .ci/install-chromium.sh (apt-get install chromium)"
	if testing.Short() {
		tb.Skip(msg)
	}
	tb.Fatal(msg)
	return ""
}

// axeSource returns axe-core's script: $CRUCIBLE_AXE_JS, else the cache
// .ci/install-chromium.sh fills, which this fills with npm when empty.
func axeSource(tb testing.TB) string {
	tb.Helper()
	path := os.Getenv("CRUCIBLE_AXE_JS")
	if path == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			tb.Fatal(err)
		}
		dir := filepath.Join(base, "crucible", "axe-core-"+axeVersion)
		path = filepath.Join(dir, "node_modules", "axe-core", "axe.min.js")
		if _, err := os.Stat(path); err != nil {
			out, err := exec.CommandContext(context.Background(), "npm", "install", "--prefix", dir, "--no-save", "--no-audit", "--no-fund",
				"axe-core@"+axeVersion).CombinedOutput()
			if err != nil {
				tb.Fatalf("fetch axe-core %s with npm (or run .ci/install-chromium.sh): %v\n%s", axeVersion, err, out)
			}
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatalf("axe-core: %v", err)
	}
	return string(b)
}

// browserSession is one headless chromium with a download directory.
type browserSession struct {
	ctx       context.Context
	downloads string
	shots     string
	axe       string
}

// newBrowser starts headless chromium at 1280x900; it is stopped at cleanup.
func newBrowser(tb testing.TB, shots string) *browserSession {
	tb.Helper()
	exe := chromiumPath(tb)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.WindowSize(1280, 900), chromedp.NoSandbox,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.UserDataDir(tb.TempDir()))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	tb.Cleanup(func() { cancelBrowser(); cancelAlloc() })
	b := &browserSession{ctx: bctx, downloads: tb.TempDir(), shots: shots}
	if err := chromedp.Do(bctx); err != nil { // starts the browser
		tb.Fatalf("start chromium: %v", err)
	}
	if _, err := cdp.Call(bctx, chromedp.FromContext(bctx).Browser, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{
		Behavior: browser.SetDownloadBehaviorBehaviorAllow, DownloadPath: b.downloads}); err != nil {
		tb.Fatalf("chromium downloads: %v", err)
	}
	return b
}

// version is the browser's product and version ("HeadlessChrome/156.0…"):
// a benchmark's figure is the browser's as much as the page's.
func (b *browserSession) version(tb testing.TB) string {
	tb.Helper()
	v, err := cdp.Call(b.ctx, chromedp.FromContext(b.ctx).Browser, browser.GetVersion, cdp.Empty{})
	if err != nil {
		tb.Fatalf("chromium version: %v", err)
	}
	return v.Product
}

// tab opens a new tab (its own sessionStorage: sign in again), one whose top
// frame chromedp knows. chromedp learns a new tab's frame only from the
// Page.frameNavigated of its about:blank, and on a loaded machine that
// navigation can commit before chromedp has enabled the tab's Page events:
// then chromedp.Navigate waits for the load of a frame it does not know and
// never returns ("open the UI: context deadline exceeded" in ci5 and ci6;
// with the frame cleared on purpose, every such navigation hangs). A
// navigation to about:blank made once the events are on, waited for until
// chromedp has the frame's document, tells it the frame.
func (b *browserSession) tab(tb testing.TB) context.Context {
	tb.Helper()
	ctx, cancel := chromedp.NewContext(b.ctx)
	tb.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil {
		tb.Fatal(err)
	}
	blank := chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, page.Navigate, page.NavigateParams{URL: "about:blank"})
		return err
	})
	run(tb, ctx, "the new tab's frame", blank, chromedp.WaitReady(chromedp.CSS("body")))
	f := &loadFailures{urls: map[network.RequestID]string{}}
	if err := chromedp.Listen(ctx, f.event); err != nil {
		tb.Fatal(err)
	}
	tabFailures.Store(chromedp.FromContext(ctx).Target, f)
	tb.Cleanup(func() { tabFailures.Delete(chromedp.FromContext(ctx).Target) })
	return ctx
}

// tabFailures maps a tab's target to its loadFailures.
var tabFailures sync.Map

// loadFailures records the requests of a tab that failed and the network
// error chromium gives for each (net::ERR_...), which the page's own
// resource timing cannot tell: a module that failed to load shows there
// only as status 0.
type loadFailures struct {
	mu     sync.Mutex
	urls   map[network.RequestID]string
	failed []string
}

// event is a chromedp.Listen callback: it must not block.
func (f *loadFailures) event(ev any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch ev := ev.(type) {
	case *network.EventRequestWillBeSent:
		f.urls[ev.RequestID] = ev.Request.URL
	case *network.EventLoadingFinished:
		delete(f.urls, ev.RequestID)
	case *network.EventLoadingFailed:
		f.failed = append(f.failed, fmt.Sprintf("%s %s canceled=%v blocked=%q", f.urls[ev.RequestID], ev.ErrorText, ev.Canceled, ev.BlockedReason))
		delete(f.urls, ev.RequestID)
	}
}

// failedLoads reports the failed requests of the tab ctx runs in.
func failedLoads(ctx context.Context) string {
	c := chromedp.FromContext(ctx)
	if c == nil {
		return "(no tab)"
	}
	v, ok := tabFailures.Load(c.Target)
	if !ok {
		return "(not recorded for this tab)"
	}
	f := v.(*loadFailures)
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.failed) == 0 {
		return "(none)"
	}
	return strings.Join(f.failed, "\n")
}

// run runs actions with a deadline, failing the test with what.
func run(tb testing.TB, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		tb.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates expr in the page (awaiting a promise) into a T.
func eval[T any](tb testing.TB, ctx context.Context, expr string) T {
	tb.Helper()
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		tb.Fatalf("evaluate %.80q: %v", expr, err)
	}
	return v
}

// waitJS polls expr in the page until it is true.
func waitJS(tb testing.TB, ctx context.Context, what, expr string, within time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.readyState + ' ' + location.href + '\n' + document.body.innerText.slice(0, 2000)`))
			// What the page fetched and how each ended (a request still
			// pending has no entry): a module that failed leaves the page
			// its static shell, an API call that never answered leaves
			// the page waiting on it.
			fetched, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`performance.getEntriesByType('resource').map(e =>
				e.name.replace(location.origin, '') + ' ' + e.responseStatus + ' ' + Math.round(e.startTime) + '+' + Math.round(e.duration) + 'ms').join('\n')`))
			tb.Fatalf("%s: not within %s (last error %v); page:\n%s\nfetched (path status start+duration):\n%s\nfailed loads (chromium's error):\n%s",
				what, within, err, text, fetched, failedLoads(ctx))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// signIn opens the UI and signs in with a hub token through the form.
func signIn(tb testing.TB, ctx context.Context, url, token, wantUser string) {
	tb.Helper()
	run(tb, ctx, "open the UI", chromedp.Navigate(url+"/#/clusters"))
	waitJS(tb, ctx, "the sign-in form", `!!document.getElementById('token')`, 60*time.Second)
	run(tb, ctx, "sign in", chromedp.SendKeys(chromedp.CSS("#token"), token), chromedp.Click(chromedp.CSS("#signin-go")))
	waitJS(tb, ctx, "signed in as "+wantUser, fmt.Sprintf(`(document.getElementById('who-user')||{}).textContent === %q`, wantUser), 30*time.Second)
}

// screenshot writes the page's full screenshot as name.png.
func (b *browserSession) screenshot(tb testing.TB, ctx context.Context, name string) {
	tb.Helper()
	sctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	png, err := chromedp.Run(sctx, chromedp.FullScreenshot(100))
	if err != nil {
		tb.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(b.shots, name+".png"), png, 0o644); err != nil {
		tb.Fatal(err)
	}
}

// checkAxe injects axe-core and fails on any serious or critical violation.
func (b *browserSession) checkAxe(tb testing.TB, ctx context.Context, page string) {
	tb.Helper()
	if b.axe == "" {
		b.axe = axeSource(tb)
	}
	run(tb, ctx, "inject axe-core", chromedp.Evaluate[chromedp.Void](b.axe))
	res := eval[string](tb, ctx, `axe.run(document, {resultTypes: ['violations']}).then(r => JSON.stringify(
		r.violations.filter(v => v.impact === 'serious' || v.impact === 'critical')
		  .map(v => ({id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.slice(0, 5).map(n => n.target.join(' '))}))))`)
	var violations []map[string]any
	if err := json.Unmarshal([]byte(res), &violations); err != nil {
		tb.Fatalf("axe on %s: %v (%q)", page, err, res)
	}
	for _, v := range violations {
		tb.Errorf("axe on %s: %v %v: %v at %v", page, v["impact"], v["id"], v["help"], v["nodes"])
	}
}

// noHorizontalScroll fails if the page is wider than the 1280 px window.
func noHorizontalScroll(tb testing.TB, ctx context.Context, page string) {
	tb.Helper()
	over := eval[int](tb, ctx, `document.documentElement.scrollWidth - document.documentElement.clientWidth`)
	if over > 0 {
		tb.Errorf("%s scrolls horizontally by %d px at 1280 px", page, over)
	}
}

// downloaded waits for a finished download named name and returns its bytes.
func (b *browserSession) downloaded(tb testing.TB, name string, within time.Duration) []byte {
	tb.Helper()
	deadline := time.Now().Add(within)
	for {
		entries, _ := os.ReadDir(b.downloads)
		for _, e := range entries {
			if e.Name() == name {
				data, err := os.ReadFile(filepath.Join(b.downloads, name))
				if err == nil {
					return data
				}
			}
		}
		if time.Now().After(deadline) {
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			tb.Fatalf("no download %s within %s (have %s)", name, within, strings.Join(names, ", "))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// noLayoutShift fails if the page's cumulative layout shift (not caused by
// input) reaches 0.1, the threshold of a "good" page.
func noLayoutShift(tb testing.TB, ctx context.Context, page string) {
	tb.Helper()
	cls := eval[float64](tb, ctx, `new Promise(res => {
		let sum = 0;
		new PerformanceObserver(list => { for (const e of list.getEntries()) if (!e.hadRecentInput) sum += e.value; })
			.observe({type: 'layout-shift', buffered: true});
		setTimeout(() => res(sum), 200);
	})`)
	if cls >= 0.1 {
		tb.Errorf("%s: cumulative layout shift %.3f, want < 0.1", page, cls)
	}
}

// colorScheme emulates prefers-color-scheme: scheme ("light" or "dark").
func colorScheme(scheme string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}})
		return err
	})
}

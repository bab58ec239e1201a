package ui

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	gocmp "github.com/google/go-cmp/cmp"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/fleet"
)

// tableView is what the Clusters page shows: its rows' names in order, the
// column aria-sort marks ("name ascending"), the count line, the filter's
// text and the URL's hash.
type tableView struct {
	Names  []string `json:"names"`
	Sorted string   `json:"sorted"`
	Count  string   `json:"count"`
	Filter string   `json:"filter"`
	Hash   string   `json:"hash"`
}

const readTable = `JSON.stringify({
	names: [...document.querySelectorAll('#cl-rows tr[data-cluster]')].map(tr => tr.dataset.cluster),
	sorted: [...document.querySelectorAll('#clusters th[aria-sort]')].map(th => th.dataset.col + ' ' + th.getAttribute('aria-sort')).join(', '),
	count: (document.getElementById('cl-count') || {}).textContent,
	filter: (document.getElementById('cl-filter') || {}).value,
	hash: location.hash,
})`

// wantTable waits for the Clusters page to show want.
func wantTable(t *testing.T, page context.Context, what string, want tableView) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		var got tableView
		if err := json.Unmarshal([]byte(eval[string](t, page, readTable)), &got); err != nil {
			t.Fatal(err)
		}
		diff := gocmp.Diff(want, got)
		if diff == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the clusters table, %s (-want +got):\n%s", what, diff)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// awaitReload waits until the page's periodic reload has replaced the rows
// (the old ones are marked first).
func awaitReload(t *testing.T, page context.Context) {
	t.Helper()
	run(t, page, "mark the rows", chromedp.Evaluate[chromedp.Void](`document.querySelector('#cl-rows tr').__old = true`))
	waitJS(t, page, "the page reloads the clusters", `!document.querySelector('#cl-rows tr').__old`, time.Minute)
}

// refilter types q over the filter's text, as a user who selects it all.
func refilter(t *testing.T, page context.Context, q string) {
	t.Helper()
	run(t, page, "filter "+q, chromedp.Focus(chromedp.CSS(`#cl-filter`)),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('cl-filter').select()`), chromedp.KeyEvent(q))
}

// TestClustersTable is issue 26's Clusters page in chromium, on one stack
// in two parts. "real": the stack's two spokes through the real
// controller's GET /api/clusters — sorted by a header's button (by mouse
// and by keyboard) with aria-sort on that column, filtered by name and by
// server, both kept in the URL across the page's reload and rebuilt from
// the URL alone, a row's details (what the cards showed) open, focus kept,
// axe-core clean. "25 synthetic": 25 spokes are too heavy for a UI test, so
// the page's fetch returns the real GET /api/clusters with 25 synthetic
// entries appended, their live pods counted in it: numeric and natural name
// order, health order, the filter and the count at 27 rows, axe-core clean,
// and a narrow window scrolling the table, not the page.
func TestClustersTable(t *testing.T) {
	chromiumPath(t)
	s, adminToken, _ := uiStack(t)
	base := s.Federation.ControllerInternalURL
	b := newBrowser(t, t.ArtifactDir())
	page := b.tab(t)
	signIn(t, page, base, adminToken, "system:serviceaccount:crucible:ui-admin")
	waitJS(t, page, "both spokes healthy", `(() => {
		const rows = [...document.querySelectorAll('#cl-rows tr[data-cluster]')];
		return rows.length === 2 && rows.every(r => r.querySelector('[data-testid=health]').textContent === 'healthy');
	})()`, 3*time.Minute)
	var real []apiv1.Cluster
	getJSON(t, base+"/api/clusters", adminToken, &real)

	t.Run("real", func(t *testing.T) { realClusters(t, b, page, real) })
	t.Run("25 synthetic", func(t *testing.T) { syntheticClusters(t, b, page, real) })
}

func realClusters(t *testing.T, b *browserSession, page context.Context, real []apiv1.Cluster) {
	servers := map[string]string{}
	for _, c := range real {
		servers[c.Name] = c.Server
	}
	if len(servers) != 2 || servers["dock"] == "" || servers["wharf"] == "" {
		t.Fatalf("GET /api/clusters: want dock and wharf, got %+v", real)
	}
	wantTable(t, page, "at first", tableView{Names: []string{"dock", "wharf"}, Sorted: "name ascending", Count: "2 of 2 clusters", Hash: "#/clusters"})

	run(t, page, "open wharf's details", chromedp.Click(chromedp.CSS(`tr[data-cluster=wharf] button.disclose`)))
	waitJS(t, page, "wharf's details show what its card did", `(() => {
		const d = document.getElementById('cl-detail-wharf');
		return !d.hidden && document.querySelector('tr[data-cluster=wharf] button.disclose').getAttribute('aria-expanded') === 'true' &&
			d.textContent.includes('API server'+`+jsString(servers["wharf"])+`) && d.textContent.includes('Reachableyes') &&
			d.textContent.includes('Credentials validyes') && /Token expiresin \d/.test(d.textContent) &&
			d.querySelector('[data-testid=live-pods]').textContent === 'pending 0, dispatched 0, running 0' &&
			d.querySelector('a').getAttribute('href') === '#/pods?cluster=wharf';
	})()`, 10*time.Second)
	if n := eval[int](t, page, `document.querySelectorAll('tr.cl-detail:not([hidden])').length`); n != 1 {
		t.Errorf("%d details open, want wharf's alone", n)
	}

	run(t, page, "sort by name, a second time", chromedp.Click(chromedp.CSS(`button[data-sort=name]`)))
	wantTable(t, page, "by name, descending", tableView{Names: []string{"wharf", "dock"}, Sorted: "name descending", Count: "2 of 2 clusters",
		Hash: "#/clusters?sort=name&dir=desc"})

	byServer := []string{"dock", "wharf"}
	slices.SortFunc(byServer, func(x, y string) int { return naturalCompare(servers[x], servers[y]) })
	run(t, page, "sort by server by keyboard", chromedp.Focus(chromedp.CSS(`button[data-sort=server]`)), chromedp.KeyEvent(kb.Enter))
	wantTable(t, page, "by server", tableView{Names: byServer, Sorted: "server ascending", Count: "2 of 2 clusters", Hash: "#/clusters?sort=server&dir=asc"})
	run(t, page, "Enter again", chromedp.KeyEvent(kb.Enter))
	slices.Reverse(byServer)
	afterFilter := tableView{Names: []string{"wharf"}, Sorted: "server descending", Count: "1 of 2 clusters", Filter: "wha",
		Hash: "#/clusters?sort=server&dir=desc&q=wha"}
	wantTable(t, page, "by server, descending", tableView{Names: byServer, Sorted: "server descending", Count: "2 of 2 clusters",
		Hash: "#/clusters?sort=server&dir=desc"})

	run(t, page, "filter by name", chromedp.SendKeys(chromedp.CSS(`#cl-filter`), "wha"))
	wantTable(t, page, "filtered by name", afterFilter)

	// The reload keeps the view, wharf's details and the focus on its button.
	run(t, page, "focus wharf's details button", chromedp.Focus(chromedp.CSS(`tr[data-cluster=wharf] button.disclose`)))
	awaitReload(t, page)
	wantTable(t, page, "after the page's reload", afterFilter)
	if !eval[bool](t, page, `!document.getElementById('cl-detail-wharf').hidden && document.activeElement.dataset.focus === 'wharf:details'`) {
		t.Error("after the reload, wharf's details are closed or its button lost the focus")
	}
	b.screenshot(t, page, "clusters-filtered")
	b.checkAxe(t, page, "clusters, filtered, details open")
	run(t, page, "dark", colorScheme("dark"))
	b.checkAxe(t, page, "clusters (dark)")
	run(t, page, "light", colorScheme("light"))

	// The URL alone: a new document shows the same view.
	run(t, page, "load the page again", chromedp.Reload())
	waitJS(t, page, "the page is back", `!!document.querySelector('#cl-rows tr[data-cluster]')`, 30*time.Second)
	wantTable(t, page, "from the URL alone", afterFilter)
	noLayoutShift(t, page, "clusters")
	noHorizontalScroll(t, page, "clusters")

	// The filter matches a server too: dock's port.
	u, err := url.Parse(servers["dock"])
	if err != nil || u.Port() == "" {
		t.Fatalf("dock's server %q has no port (%v)", servers["dock"], err)
	}
	q := ":" + u.Port()
	if strings.Contains(servers["wharf"], q) {
		t.Fatalf("wharf's server %q contains dock's port %q", servers["wharf"], q)
	}
	refilter(t, page, q)
	wantTable(t, page, "filtered by server", tableView{Names: []string{"dock"}, Sorted: "server descending", Count: "1 of 2 clusters", Filter: q,
		Hash: clustersHash("server", true, q)})
}

// synthetic is a cluster the test's fetch wrapper adds to GET /api/clusters,
// with its live pods counted (Cluster.Live, from Pods) unless Fail: the
// store could not count them.
type synthetic struct {
	Cluster apiv1.Cluster  `json:"cluster"`
	Pods    map[string]int `json:"pods"`
	Fail    bool           `json:"fail"`
}

// syntheticFleet is 25 clusters named so that natural and byte order differ
// (batch-9 before batch-12), every health, running counts of one to four
// digits and one whose pods were not counted; the rack-b ones are found by
// their server only.
func syntheticFleet(now time.Time) []synthetic {
	var out []synthetic
	for i := 1; i <= 25; i++ {
		name := fmt.Sprintf("%s-%d", []string{"batch", "gpu", "edge"}[i%3], i)
		hl := fleet.Health{Cluster: name, Reachable: true, CredentialsValid: true, CheckedAt: now.Add(-time.Duration(i) * time.Second)}
		switch {
		case i == 13:
			hl = fleet.Health{Cluster: name}
		case i%5 == 0:
			hl.Reachable, hl.CredentialsValid, hl.LastError = false, false, "dial tcp: connect: connection refused"
		case i%7 == 0:
			hl.CredentialsValid, hl.LastError = false, "Unauthorized"
		}
		if i%4 != 0 {
			exp := now.Add(time.Duration(i) * time.Hour)
			hl.TokenExpiry = &exp
		}
		sy := synthetic{
			Cluster: apiv1.Cluster{Name: name, Server: fmt.Sprintf("https://%s.rack-%c.example:6443", name, 'a'+i%2), LoopNamespace: "crucible-loops", Health: hl,
				Owner: fmt.Sprintf("crucible-%d_5f0c8a2e-1b7d-4c9e-9a61-3d2f0e7b8c41", i%3), Draining: i == 3},
			Pods: map[string]int{"pending": i % 4, "dispatched": i % 3 * 5, "running": i * 37 % 101},
			Fail: i == 11,
		}
		if i == 25 {
			sy.Pods = map[string]int{"running": 5000}
		}
		if !sy.Fail {
			sy.Cluster.Live = &apiv1.LiveCounts{Pending: int64(sy.Pods["pending"]), Dispatched: int64(sy.Pods["dispatched"]), Running: int64(sy.Pods["running"])}
		}
		out = append(out, sy)
	}
	return out
}

// appendClusters wraps the page's fetch: GET /api/clusters is the real
// answer with the synthetic entries after it. The page asks nothing else
// of a cluster's pods: a request for one of theirs fails the test.
const appendClusters = `((extra) => {
	const real = window.fetch;
	const json = (status, body) => new Response(JSON.stringify(body), { status, headers: { 'Content-Type': 'application/json' } });
	window.fetch = async (input, init) => {
		const u = new URL(typeof input === 'string' ? input : input.url, location.href);
		if (u.pathname === '/api/clusters') {
			const resp = await real(input, init);
			return resp.ok ? json(200, [...await resp.json(), ...extra.map((e) => e.cluster)]) : resp;
		}
		if (u.pathname === '/api/pods' && extra.some((x) => x.cluster.name === u.searchParams.get('cluster'))) {
			window.__podRequests = (window.__podRequests || 0) + 1;
		}
		return real(input, init);
	};
})`

func syntheticClusters(t *testing.T, b *browserSession, page context.Context, real []apiv1.Cluster) {
	extra := syntheticFleet(time.Now())
	rows := make([]synthetic, 0, len(real)+len(extra))
	for _, c := range real {
		rows = append(rows, synthetic{Cluster: c, Pods: map[string]int{"pending": 0, "dispatched": 0, "running": 0}}) // nothing was submitted
	}
	rows = append(rows, extra...)
	js, _ := json.Marshal(extra)
	run(t, page, "append 25 clusters to GET /api/clusters", chromedp.Evaluate[chromedp.Void](appendClusters+"("+string(js)+")"))

	all := func(col string, desc bool, q string) tableView {
		names := sortedNames(rows, col, desc, q)
		return tableView{Names: names, Sorted: col + map[bool]string{false: " ascending", true: " descending"}[desc],
			Count: fmt.Sprintf("%d of %d clusters", len(names), len(rows)), Filter: q, Hash: clustersHash(col, desc, q)}
	}
	run(t, page, "open the clusters by running, descending", chromedp.Evaluate[chromedp.Void](`location.hash = '#/clusters?sort=running&dir=desc'`))
	wantTable(t, page, "27 rows by running, descending", all("running", true, ""))
	if got := eval[string](t, page, `[...document.querySelectorAll('#cl-rows tr[data-cluster]')].slice(0, 3).map(tr => tr.querySelector('td[data-col=running]').textContent).join(' ')`); got != "5000 97 94" {
		t.Errorf("the top three running counts: %q, want 5000 97 94", got)
	}
	unread := extra[slices.IndexFunc(extra, func(sy synthetic) bool { return sy.Fail })].Cluster.Name
	if got := eval[string](t, page, `document.querySelector('tr[data-cluster=`+unread+`] td[data-col=running]').textContent`); got != "—" {
		t.Errorf("%s, whose pods were not counted, shows running %q, want —", unread, got)
	}
	if n := eval[int](t, page, `window.__podRequests || 0`); n != 0 {
		t.Errorf("the page listed a cluster's pods %d times to count them, want none: GET /api/clusters counts them", n)
	}
	// The replica running a cluster's loops, by its host part; a draining
	// cluster says so.
	for _, sy := range extra[:3] {
		want := strings.TrimSuffix(sy.Cluster.Owner, "_5f0c8a2e-1b7d-4c9e-9a61-3d2f0e7b8c41")
		if sy.Cluster.Draining {
			want += " draining"
		}
		if got := eval[string](t, page, `document.querySelector('tr[data-cluster=`+sy.Cluster.Name+`] td[data-col=owner]').textContent`); got != want {
			t.Errorf("%s: owner cell %q, want %q", sy.Cluster.Name, got, want)
		}
	}
	run(t, page, "sort by running again", chromedp.Click(chromedp.CSS(`button[data-sort=running]`)))
	wantTable(t, page, "by running, ascending", all("running", false, ""))
	run(t, page, "sort by name", chromedp.Click(chromedp.CSS(`button[data-sort=name]`)))
	wantTable(t, page, "by name", all("name", false, ""))
	run(t, page, "sort by health, twice", chromedp.Click(chromedp.CSS(`button[data-sort=health]`)), chromedp.Click(chromedp.CSS(`button[data-sort=health]`)))
	wantTable(t, page, "by health, descending", all("health", true, ""))
	b.screenshot(t, page, "clusters-27")
	b.checkAxe(t, page, "clusters, 27 rows")

	run(t, page, "filter gpu", chromedp.SendKeys(chromedp.CSS(`#cl-filter`), "gpu"))
	wantTable(t, page, "gpu, by health", all("health", true, "gpu"))
	refilter(t, page, "rack-b")
	rackB := all("health", true, "rack-b")
	if len(rackB.Names) == 0 || slices.ContainsFunc(rackB.Names, func(n string) bool { return strings.Contains(n, "rack-b") }) {
		t.Fatalf("rack-b should match servers only: %v", rackB.Names)
	}
	wantTable(t, page, "rack-b, by health", rackB)
	awaitReload(t, page)
	wantTable(t, page, "rack-b after the reload", rackB)

	// At 600 px the table scrolls inside its box; the page does not widen.
	run(t, page, "a narrow window", chromedp.EmulateViewport(600, 900))
	wide := eval[string](t, page, `(() => {
		const w = document.querySelector('.tablewrap'), m = document.getElementById('main');
		return [w.scrollWidth > w.clientWidth, w.getBoundingClientRect().right <= document.documentElement.clientWidth, m.scrollWidth <= m.clientWidth].join(' ');
	})()`)
	if wide != "true true true" {
		t.Errorf("at 600 px (table scrolls inside, its box fits the window, main does not overflow): %s, want true true true", wide)
	}
	b.screenshot(t, page, "clusters-narrow")
	b.checkAxe(t, page, "clusters, narrow")
	run(t, page, "the window again", chromedp.ResetViewport())
}

// clustersHash is the page's URL for a view, its query in the page's order;
// the default (by name, ascending) is left out.
func clustersHash(col string, desc bool, q string) string {
	var parts []string
	if col != "name" || desc {
		parts = append(parts, "sort="+col, "dir="+map[bool]string{false: "asc", true: "desc"}[desc])
	}
	if q != "" {
		parts = append(parts, "q="+url.QueryEscape(q))
	}
	if len(parts) == 0 {
		return "#/clusters"
	}
	return "#/clusters?" + strings.Join(parts, "&")
}

// healthRank is the page's health order, best first.
func healthRank(hl fleet.Health) int {
	switch {
	case hl.CheckedAt.IsZero():
		return 1
	case !hl.Reachable:
		return 3
	case !hl.CredentialsValid:
		return 2
	}
	return 0
}

// sortedNames is the order the page should show rows in: those whose name
// or server contains q, by col (missing values last either way), then by
// name.
func sortedNames(rows []synthetic, col string, desc bool, q string) []string {
	key := func(r synthetic) (int, bool) {
		switch col {
		case "health":
			return healthRank(r.Cluster.Health), true
		case "running", "pending", "dispatched":
			return r.Pods[col], !r.Fail
		}
		return 0, true
	}
	var keep []synthetic
	for _, r := range rows {
		if q == "" || strings.Contains(r.Cluster.Name, q) || strings.Contains(r.Cluster.Server, q) {
			keep = append(keep, r)
		}
	}
	slices.SortStableFunc(keep, func(a, b synthetic) int {
		x, okx := key(a)
		y, oky := key(b)
		var d int
		switch {
		case okx != oky && !okx:
			return 1
		case okx != oky:
			return -1
		case col == "name":
			d = naturalCompare(a.Cluster.Name, b.Cluster.Name)
		default:
			d = cmp.Compare(x, y)
		}
		if desc {
			d = -d
		}
		if d != 0 {
			return d
		}
		return naturalCompare(a.Cluster.Name, b.Cluster.Name)
	})
	names := make([]string, len(keep))
	for i, r := range keep {
		names[i] = r.Cluster.Name
	}
	return names
}

// naturalCompare orders strings as the page's numeric collation does for
// names and URLs of ASCII letters, digits and punctuation: runs of digits
// by their value, the rest byte by byte.
func naturalCompare(a, b string) int {
	for a != "" && b != "" {
		da, db := digitRun(a), digitRun(b)
		if da > 0 && db > 0 {
			x, _ := strconv.Atoi(a[:da])
			y, _ := strconv.Atoi(b[:db])
			if x != y {
				return cmp.Compare(x, y)
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return cmp.Compare(a[0], b[0])
		}
		a, b = a[1:], b[1:]
	}
	return cmp.Compare(len(a), len(b))
}

func digitRun(s string) int {
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	return n
}

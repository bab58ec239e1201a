package ui

import (
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/google/go-cmp/cmp"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/store"
)

// recordPosts wraps the page's fetch: every POST /api/pods records the
// body it sent and the status it got in __posts.
const recordPosts = `(() => {
	window.__posts = [];
	const orig = window.fetch;
	window.fetch = async (input, init = {}) => {
		const url = typeof input === 'string' ? input : input.url;
		if ((init.method || 'GET') !== 'POST' || new URL(url, location.href).pathname !== '/api/pods') return orig(input, init);
		const rec = { body: JSON.parse(init.body) };
		window.__posts.push(rec);
		const resp = await orig(input, init);
		rec.status = resp.status;
		return resp;
	};
})()`

// classOption is one option of the form's class picker.
type classOption struct {
	Value    string `json:"value"`
	Text     string `json:"text"`
	Selected bool   `json:"selected"`
}

// askField is one ask the chosen class allows: its input's id and bound.
type askField struct {
	ID   string `json:"id"`
	Hint string `json:"hint"`
}

// classForm is what the picker shows for the form's cluster.
type classForm struct {
	Options []classOption `json:"options"`
	About   string        `json:"about"`
	Asks    []askField    `json:"asks"`
}

const readClassForm = `JSON.stringify({
	options: [...document.querySelectorAll('#s-class option')].map(o => ({value: o.value, text: o.textContent, selected: o.selected})),
	about: document.getElementById('s-class-about').textContent,
	asks: [...document.querySelectorAll('#s-asks input')].map(i => ({id: i.id, hint: document.getElementById(i.id + '-hint').textContent})),
})`

// optionTexts are how the picker offers the dev stack's standard and gpu
// classes; any other class it has is checked by its name and max deadline.
var optionTexts = map[string]string{
	"standard": "standard (default) — cpu ≤ 16, memory ≤ 64Gi, deadline ≤ 48h",
	"gpu":      "gpu — GPUs 1–8, memory ≤ 64Gi, deadline ≤ 48h",
}

var (
	standardAsks  = []askField{{"s-res-cpu", "up to 16; default 50m"}, {"s-res-memory", "up to 64Gi; default 64Mi"}, {"s-deadline", "at most 48h; default 6h"}}
	standardAbout = "Gets requests cpu 50m, memory 64Mi; limits memory 1Gi; deadline 6h."
)

// offeredOptions are the options the picker should show: the classes GET
// /api/classes offers on cluster, in its order, with selected chosen.
func offeredOptions(t *testing.T, offered []apiv1.ClusterClasses, cluster, selected string) []classOption {
	t.Helper()
	for _, cc := range offered {
		if cc.Cluster != cluster {
			continue
		}
		var out []classOption
		for _, c := range cc.Classes {
			out = append(out, classOption{Value: c.Name, Text: optionTexts[c.Name], Selected: c.Name == selected})
		}
		return out
	}
	t.Fatalf("GET /api/classes offers nothing on %s: %+v", cluster, offered)
	return nil
}

// TestClassesWaitingAndHistory is issue 22's UI in chromium: the form's
// class picker offers what each cluster offers, with every class's bounds,
// the kind's default chosen, and inputs for just the asks the chosen class
// allows; a 422 shows at the field it names; a submit with a class sends
// the class and its asks; the pod that waits for GPUs says why on its page
// and in the list; a pod's timeline is its history. All by keyboard, and
// axe-core clean.
func TestClassesWaitingAndHistory(t *testing.T) {
	chromiumPath(t)
	s, adminToken, _ := uiStack(t)
	url := s.Federation.ControllerInternalURL
	b := newBrowser(t, t.ArtifactDir())
	page := b.tab(t)
	signIn(t, page, url, adminToken, "system:serviceaccount:crucible:ui-admin")
	run(t, page, "open the form", chromedp.Navigate(url+"/#/submit"), chromedp.WaitVisible(chromedp.CSS("#s-image")))
	run(t, page, "record the posts", chromedp.Evaluate[chromedp.Void](recordPosts))
	waitJS(t, page, "the classes are read", `!document.getElementById('s-class').disabled`, 30*time.Second)
	noLayoutShift(t, page, "submit with classes")

	// dock, the first cluster, withholds gpu; wharf offers it second.
	var offered []apiv1.ClusterClasses
	getJSON(t, url+"/api/classes", adminToken, &offered)
	dock := offeredOptions(t, offered, "dock", "standard")
	if slices.ContainsFunc(dock, func(o classOption) bool { return o.Value == "gpu" }) {
		t.Fatalf("dock offers gpu: %+v", offered)
	}
	wantForm(t, page, "dock", classForm{Options: dock, About: standardAbout, Asks: standardAsks})
	run(t, page, "choose wharf by keyboard", chromedp.Focus(chromedp.CSS("#s-cluster")), chromedp.KeyEvent(kb.ArrowDown))
	wantForm(t, page, "wharf", classForm{Options: offeredOptions(t, offered, "wharf", "standard"), About: standardAbout, Asks: standardAsks})
	if eval[string](t, page, `document.querySelectorAll('#s-class option')[1].value`) != "gpu" {
		t.Fatal("gpu is not wharf's second class")
	}
	gpuForm := classForm{
		Options: offeredOptions(t, offered, "wharf", "gpu"),
		About:   "Gets requests cpu 1, memory 1Gi; limits memory 16Gi; 1 × nvidia.com/gpu; deadline 6h; /dev/shm 1Gi.",
		Asks:    []askField{{"s-gpus", "1–8 nvidia.com/gpu; default 1"}, {"s-res-memory", "up to 64Gi; default 1Gi"}, {"s-deadline", "at most 48h; default 6h"}},
	}
	run(t, page, "choose gpu by keyboard", chromedp.Focus(chromedp.CSS("#s-class")), chromedp.KeyEvent(kb.ArrowDown))
	wantForm(t, page, "wharf with gpu chosen", gpuForm)
	run(t, page, "a new kind keeps the chosen class", chromedp.Focus(chromedp.CSS("#s-kind")), chromedp.KeyEvent(kb.ArrowDown))
	wantForm(t, page, "wharf, kind loop, gpu chosen", gpuForm) // standard is loop's default too
	run(t, page, "back to turn", chromedp.Focus(chromedp.CSS("#s-kind")), chromedp.KeyEvent(kb.ArrowUp))

	// 9 GPUs: the API's 422 at the GPUs input, which gets the focus.
	run(t, page, "ask 9 GPUs and press Enter", chromedp.SendKeys(chromedp.CSS("#s-image"), "busybox"),
		chromedp.SetValue(chromedp.CSS("#s-command"), "sleep\n3600"), chromedp.SendKeys(chromedp.CSS("#s-gpus"), "9"+kb.Enter))
	const refusal = `gpus: Invalid value: 9: must be from 1 to 8 for class "gpu"`
	waitJS(t, page, "the refusal at the GPUs input", `document.getElementById('s-gpus-error').textContent === `+jsString(refusal)+` &&
		document.activeElement.id === 's-gpus' && document.getElementById('s-gpus').getAttribute('aria-invalid') === 'true' &&
		document.getElementById('submit-error').textContent === 'Not submitted: a field below needs a change.' && location.hash === '#/submit'`, time.Minute)
	b.screenshot(t, page, "submit-refused")
	b.checkAxe(t, page, "submit with a refused ask")
	noHorizontalScroll(t, page, "submit with a refused ask")

	// 5 GPUs, more than wharf's GPU node has, and 2Gi: sent with the class.
	run(t, page, "ask 5 GPUs and 2Gi", chromedp.SetValue(chromedp.CSS("#s-gpus"), "5"), chromedp.SendKeys(chromedp.CSS("#s-res-memory"), "2Gi"),
		chromedp.Click(chromedp.CSS("#s-go")))
	waitJS(t, page, "the form opens the new pod", `/^#\/pods\/turn-[a-z0-9]+$/.test(location.hash)`, time.Minute)
	id := strings.TrimPrefix(eval[string](t, page, `location.hash`), "#/pods/")
	var posts []struct {
		Body   apiv1.SubmitRequest `json:"body"`
		Status int                 `json:"status"`
	}
	if err := json.Unmarshal([]byte(eval[string](t, page, `JSON.stringify(window.__posts)`)), &posts); err != nil {
		t.Fatal(err)
	}
	nine, five := 9, 5
	wantPosts := []apiv1.SubmitRequest{
		{Cluster: "wharf", Kind: "turn", Image: "busybox", Command: []string{"sleep", "3600"}, Class: "gpu", GPUs: &nine},
		{Cluster: "wharf", Kind: "turn", Image: "busybox", Command: []string{"sleep", "3600"}, Class: "gpu", GPUs: &five, Resources: map[string]string{"memory": "2Gi"}},
	}
	if len(posts) != 2 || posts[0].Status != 422 || posts[1].Status != 201 {
		t.Fatalf("posts %+v, want a 422 and a 201", posts)
	}
	if diff := cmp.Diff(wantPosts, []apiv1.SubmitRequest{posts[0].Body, posts[1].Body}); diff != "" {
		t.Errorf("the form's posts (-want +got):\n%s", diff)
	}

	waitingPodPage(t, b, page, url, adminToken, id)
	finishedPodPage(t, b, page, s, adminToken)
}

// waitingPodPage: the pod waiting for GPUs says why, with the scheduler's
// message, on its page and in the list, and its timeline is its history.
func waitingPodPage(t *testing.T, b *browserSession, page context.Context, url, token, id string) {
	t.Helper()
	waitJS(t, page, "the pod waits", `((document.getElementById('pod-waiting')||{}).textContent||'').startsWith('Unschedulable — 0/2 nodes are available: ')`, time.Minute)
	var wp apiv1.WorkPod
	getJSON(t, url+"/api/pods/"+id, token, &wp)
	if wp.Waiting == nil || !strings.Contains(wp.Waiting.Message, "Insufficient nvidia.com/gpu") {
		t.Fatalf("the API says the pod waits %+v, want Insufficient nvidia.com/gpu", wp.Waiting)
	}
	for _, tt := range []struct{ what, js, want string }{
		{"waiting", `document.getElementById('pod-waiting').textContent`, "Unschedulable — " + strings.Join(strings.Fields(wp.Waiting.Message), " ")},
		{"badge", `document.querySelector('.pod-head [data-testid=waiting]').textContent`, "waiting: Unschedulable"},
		{"badge's tooltip", `document.querySelector('.pod-head [data-testid=waiting]').title`, wp.Waiting.Message},
		{"node", `document.getElementById('pod-node').textContent`, "—"},
		{"state", `document.getElementById('pod-state').textContent`, "dispatched"},
	} {
		if got := eval[string](t, page, tt.js); got != tt.want {
			t.Errorf("pod page's %s: %q, want %q", tt.what, got, tt.want)
		}
	}
	history := waitTimeline(t, page, url, token, id, func(h []apiv1.HistoryEntry) bool { return len(h) > 0 && h[len(h)-1].Event == store.EventWaiting })
	if got := whats(history); !cmp.Equal(got, []string{"pending", "dispatched", "waiting"}) {
		t.Errorf("the waiting pod's history %v, want pending, dispatched, waiting", got)
	}
	b.screenshot(t, page, "pod-waiting")
	b.checkAxe(t, page, "waiting pod")
	noHorizontalScroll(t, page, "waiting pod")

	run(t, page, "open the list", chromedp.Navigate(url+"/#/pods"))
	waitJS(t, page, "the list shows the wait", `(document.querySelector('tr[data-pod=`+jsString(id)+`] [data-testid=waiting]')||{}).textContent === 'waiting: Unschedulable'`, 30*time.Second)
	b.checkAxe(t, page, "pods with a waiting one")
}

// finishedPodPage: a pod that ran on wharf's CPU node shows the node and
// no wait, and its timeline holds every moment of its life in order.
func finishedPodPage(t *testing.T, b *browserSession, page context.Context, s *devstack.Stack, token string) {
	t.Helper()
	url := s.Federation.ControllerInternalURL
	id := submitAPI(t, s, token, apiv1.SubmitRequest{Cluster: "wharf", Image: "busybox", Command: []string{"sleep", "1"}})
	run(t, page, "open the finished pod", chromedp.Navigate(url+"/#/pods/"+id))
	waitJS(t, page, "it succeeds", `(document.getElementById('pod-state')||{}).textContent === 'succeeded'`, 2*time.Minute)
	history := waitTimeline(t, page, url, token, id, func(h []apiv1.HistoryEntry) bool { return len(h) > 0 && h[len(h)-1].State == store.StateSucceeded })
	got := whats(history)
	// The watch may see the pod bound before the dispatch records it.
	if !isSubsequence([]string{"pending", "scheduled", "started", "running", "succeeded"}, got) || !slices.Contains(got, "dispatched") ||
		got[len(got)-1] != "succeeded" {
		t.Errorf("the finished pod's history %v, want pending, dispatched, scheduled, started, running … succeeded last", got)
	}
	if node := eval[string](t, page, `document.getElementById('pod-node').textContent`); node != devstack.NodeName {
		t.Errorf("node %q, want %s", node, devstack.NodeName)
	}
	if n := eval[int](t, page, `document.querySelectorAll('#pod-waiting, .pod-head [data-testid=waiting]').length`); n != 0 {
		t.Errorf("a finished pod shows %d waits", n)
	}
	b.screenshot(t, page, "pod-history")
	b.checkAxe(t, page, "finished pod with history")
}

// timelineRow is one row of the pod page's history.
type timelineRow struct {
	Event  string `json:"event"`
	At     string `json:"at"`
	What   string `json:"what"`
	Detail string `json:"detail"`
	Wait   string `json:"wait"`
}

// waits is how the timeline spells the time since the entry before.
var waits = regexp.MustCompile(`^\+(\d+ms|\d\.\ds|\d+s|\d+m \d\ds|\d+h \d\dm|\d+d \d+h)$`)

// waitTimeline waits until the API's history of id satisfies done and the
// page's timeline shows exactly it, and returns it.
func waitTimeline(t *testing.T, page context.Context, url, token, id string, done func([]apiv1.HistoryEntry) bool) []apiv1.HistoryEntry {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var wp apiv1.WorkPod
		getJSON(t, url+"/api/pods/"+id, token, &wp)
		var rows []timelineRow
		if err := json.Unmarshal([]byte(eval[string](t, page, `JSON.stringify([...document.querySelectorAll('#history-rows tr')].map(tr => ({
			event: tr.dataset.event, at: tr.cells[0].title, what: tr.cells[1].textContent, detail: tr.cells[2].textContent, wait: tr.cells[3].textContent})))`)), &rows); err != nil {
			t.Fatal(err)
		}
		want := make([]timelineRow, len(wp.History))
		for i, e := range wp.History {
			want[i] = timelineRow{Event: string(e.Event), At: e.At.Format(time.RFC3339Nano), What: whats(wp.History[i : i+1])[0], Detail: entryDetail(e)}
			if i > 0 && i < len(rows) {
				want[i].Wait = rows[i].Wait // checked by its form below: the page rounds
			}
		}
		diff := cmp.Diff(want, rows)
		if diff == "" && done(wp.History) {
			for i, r := range rows[1:] {
				if !waits.MatchString(r.Wait) {
					t.Errorf("entry %d's wait %q, want e.g. +12s", i+1, r.Wait)
				}
			}
			return wp.History
		}
		if time.Now().After(deadline) {
			t.Fatalf("the timeline of %s (-history +page):\n%s", id, diff)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// entryDetail is the detail the timeline shows of an entry.
func entryDetail(e apiv1.HistoryEntry) string {
	if e.Event == store.EventScheduled && e.Message != "" {
		return "on " + e.Message
	}
	var parts []string
	for _, p := range []string{e.Reason, strings.Join(strings.Fields(e.Message), " ")} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	return strings.Join(parts, " — ")
}

// whats names the history's entries as the CLI and the timeline do.
func whats(h []apiv1.HistoryEntry) []string {
	out := make([]string, 0, len(h))
	for _, e := range h {
		out = append(out, e.What())
	}
	return out
}

// isSubsequence reports whether want appears in got in order.
func isSubsequence(want, got []string) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	return i == len(want)
}

// wantForm waits for the picker to show want for the form's cluster. An
// option want has no text for must name its class and its max deadline.
func wantForm(t *testing.T, page context.Context, what string, want classForm) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var got classForm
		if err := json.Unmarshal([]byte(eval[string](t, page, readClassForm)), &got); err != nil {
			t.Fatal(err)
		}
		for i, o := range got.Options {
			if i < len(want.Options) && want.Options[i].Text == "" && strings.HasPrefix(o.Text, o.Value+" — ") && strings.Contains(o.Text, "deadline ≤ ") {
				got.Options[i].Text = ""
			}
		}
		diff := cmp.Diff(want, got)
		if diff == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the class picker on %s (-want +got):\n%s", what, diff)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// jsString is s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

package ui

import (
	"encoding/json"
	"maps"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"crucible.dev/crucible/internal/api/apiv1"
)

// cutPosts wraps the page's fetch: every POST /api/pods records its
// Idempotency-Key, the controller's status and Idempotent-Replayed header in
// __posts. With __cut set, the next POST reaches the controller but its
// answer is thrown away: __cut 'reset' throws a TypeError as a cut
// connection does, a number answers that status instead (a proxy's 503).
const cutPosts = `(() => {
	window.__posts = []; window.__cut = null;
	const orig = window.fetch;
	window.fetch = async (input, init = {}) => {
		const url = typeof input === 'string' ? input : input.url;
		if ((init.method || 'GET') !== 'POST' || new URL(url, location.href).pathname !== '/api/pods') return orig(input, init);
		const rec = { key: new Headers(init.headers).get('Idempotency-Key') };
		window.__posts.push(rec);
		const resp = await orig(input, init);
		rec.status = resp.status; rec.replayed = resp.headers.get('Idempotent-Replayed');
		const cut = window.__cut;
		window.__cut = null;
		if (cut === 'reset') { rec.cut = true; throw new TypeError('Failed to fetch'); }
		if (cut) { rec.cut = true; return new Response('{"error":"upstream gone"}', { status: cut, headers: { 'Content-Type': 'application/json' } }); }
		return resp;
	};
})()`

// postRec is one of __posts.
type postRec struct {
	Key      string `json:"key"`
	Status   int    `json:"status"`
	Replayed string `json:"replayed"`
	Cut      bool   `json:"cut"`
}

// TestSubmitIdempotencyKey is the form's side of issue 15: a resend after no
// answer carries the same key and is answered with the row the first one
// made; changed content, or any answer but 503/504, gets a new key.
func TestSubmitIdempotencyKey(t *testing.T) {
	chromiumPath(t)
	s, adminToken, _ := uiStack(t)
	url := s.Federation.ControllerInternalURL
	b := newBrowser(t, t.ArtifactDir())
	page := b.tab(t)
	signIn(t, page, url, adminToken, "system:serviceaccount:crucible:ui-admin")
	run(t, page, "open the form", chromedp.Navigate(url+"/#/submit"), chromedp.WaitVisible(chromedp.CSS("#s-image")))
	run(t, page, "wrap fetch", chromedp.Evaluate[chromedp.Void](cutPosts))
	posts := func() []postRec {
		var ps []postRec
		if err := json.Unmarshal([]byte(eval[string](t, page, `JSON.stringify(window.__posts)`)), &ps); err != nil {
			t.Fatal(err)
		}
		return ps
	}
	// submit clicks Submit (the answer cut as cut says, "" not at all) and
	// waits for the POST to be answered and the form to be ready again.
	submit := func(what, cut string, n int) {
		t.Helper()
		if cut != "" {
			run(t, page, "cut the next answer", chromedp.Evaluate[chromedp.Void](`window.__cut = `+cut))
		}
		run(t, page, what, chromedp.Click(chromedp.CSS("#s-go")))
		waitJS(t, page, what+": answered", `window.__posts.length === `+strconv.Itoa(n)+` && window.__posts[`+strconv.Itoa(n-1)+`].status > 0 &&
			(!document.getElementById('s-go') || !document.getElementById('s-go').disabled)`, time.Minute)
	}

	// Image one: a 503, then no answer; image two (a changed form): no
	// answer, then the controller's. Every one reached the controller.
	run(t, page, "fill the form", chromedp.SetValue(chromedp.CSS("#s-cluster"), "wharf"),
		chromedp.SetValue(chromedp.CSS("#s-image"), "busybox:one"), chromedp.SetValue(chromedp.CSS("#s-command"), "true"))
	submit("submit image one, answered 503", "503", 1)
	waitJS(t, page, "the form shows the 503", `document.getElementById('submit-error').textContent === 'upstream gone' && location.hash === '#/submit'`, 10*time.Second)
	submit("submit image one again, answer cut", "'reset'", 2)
	run(t, page, "change the image", chromedp.SetValue(chromedp.CSS("#s-image"), "busybox:two"))
	submit("submit image two, answer cut", "'reset'", 3)
	submit("submit image two again", "", 4)
	ps := posts()
	for i, p := range ps {
		if p.Key == "" || p.Status != http.StatusCreated || p.Cut != (i < 3) || (p.Replayed == "true") != (i == 1 || i == 3) {
			t.Errorf("post %d: %+v; want a key, 201, replayed on the resends", i, p)
		}
	}
	if ps[1].Key != ps[0].Key || ps[3].Key != ps[2].Key {
		t.Errorf("a resend after no answer or a 503 changed its key: %q→%q, %q→%q", ps[0].Key, ps[1].Key, ps[2].Key, ps[3].Key)
	}
	if ps[2].Key == ps[1].Key {
		t.Errorf("a changed form kept its key %q", ps[1].Key)
	}
	if t.Failed() {
		t.FailNow()
	}
	waitJS(t, page, "the form opens the pod", `/^#\/pods\/turn-[a-z0-9]+$/.test(location.hash)`, time.Minute)
	landed := eval[string](t, page, `location.hash.slice('#/pods/'.length)`)
	want := map[string]int{"busybox:one": 1, "busybox:two": 1}
	if images := rowImages(t, url, adminToken); !maps.Equal(images, want) {
		t.Errorf("rows by image after four submits of two requests: %v, want %v", images, want)
	}
	var wp apiv1.WorkPod
	if getJSON(t, url+"/api/pods/"+landed, adminToken, &wp); wp.Image != "busybox:two" {
		t.Errorf("the form opened %s of image %q, want the row of busybox:two", landed, wp.Image)
	}

	// A 400 is an answer: the same form sent again, and then corrected,
	// each gets a new key.
	run(t, page, "open a new form", chromedp.Navigate(url+"/#/submit"), chromedp.WaitVisible(chromedp.CSS("#s-image")))
	run(t, page, "fill it with an env name the server refuses", chromedp.SetValue(chromedp.CSS("#s-image"), "busybox:three"),
		chromedp.SetValue(chromedp.CSS("#s-command"), "true"), chromedp.SetValue(chromedp.CSS("#s-env"), "BAD-NAME=x"))
	submit("submit a bad env name", "", 5)
	submit("submit it again", "", 6)
	run(t, page, "correct the env name", chromedp.SetValue(chromedp.CSS("#s-env"), "GOOD_NAME=x"))
	submit("submit the corrected form", "", 7)
	waitJS(t, page, "the form opens the pod", `/^#\/pods\/turn-[a-z0-9]+$/.test(location.hash) && location.hash !== '#/pods/`+landed+`'`, time.Minute)
	ps = posts()
	if ps[4].Status != http.StatusBadRequest || ps[5].Status != http.StatusBadRequest || ps[6].Status != http.StatusCreated {
		t.Errorf("statuses %d %d %d, want 400 400 201", ps[4].Status, ps[5].Status, ps[6].Status)
	}
	if ps[4].Key == ps[5].Key || ps[5].Key == ps[6].Key || ps[4].Key == ps[3].Key {
		t.Errorf("keys after answers: %q, %q, %q; want each new", ps[4].Key, ps[5].Key, ps[6].Key)
	}
	want["busybox:three"] = 1
	if images := rowImages(t, url, adminToken); !maps.Equal(images, want) {
		t.Errorf("rows by image at the end: %v, want %v", images, want)
	}
}

// rowImages counts the stack's rows by image, read through the API.
func rowImages(t *testing.T, url, token string) map[string]int {
	t.Helper()
	var rows []apiv1.WorkPod
	getJSON(t, url+"/api/pods?limit=100", token, &rows)
	n := map[string]int{}
	for _, r := range rows {
		var wp apiv1.WorkPod // list views carry no image
		getJSON(t, url+"/api/pods/"+r.ID, token, &wp)
		n[wp.Image]++
	}
	return n
}

func getJSON(t *testing.T, url, token string, v any) {
	t.Helper()
	r, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	r.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
}

// Package ui tests crucible's web UI in a real browser: Debian's chromium,
// driven headless by chromedp, against a dev stack of its own (a hub, two
// spokes, the controller with auth "kubernetes"). It has its own package
// and TestMain so that it does not wait on the e2e package's shared stack.
package ui

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
	"crucible.dev/crucible/internal/render"
)

func TestMain(m *testing.M) {
	os.Exit(devstacktest.Main(m, devstack.Options{}))
}

// uiStack starts a stack with two spokes and the API on auth "kubernetes",
// and returns it with tokens of an admin and a viewer.
func uiStack(t *testing.T) (s *devstack.Stack, admin, viewer string) {
	t.Helper()
	s = devstacktest.Start(t, devstack.Options{
		Crucible: devstacktest.BuildCrucible, Spokes: []devstack.SpokeOptions{{Name: "wharf"}, {Name: "dock"}},
		RetryBudget: 90 * time.Second,
	})
	base, err := os.ReadFile(s.Federation.ProfileFile)
	if err != nil {
		t.Fatal(err)
	}
	objs := render.HubRBAC(devstack.HubNamespace, devstack.HubServiceAccount)
	for name, role := range map[string]string{"ui-admin": render.HubAdminName, "ui-viewer": render.HubViewerName} {
		objs = append(objs, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: devstack.HubNamespace}},
			&rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: devstack.HubNamespace},
				Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: devstack.HubNamespace, Name: name}},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			})
	}
	applyHub(t, s, objs...)
	if err := os.WriteFile(s.Federation.ProfileFile, append(base, "\n[api]\nauth = \"kubernetes\"\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.RestartProcess(t.Context(), "crucible-controller", s.ControllerReady); err != nil {
		t.Fatal(err)
	}
	tok := func(sa string) string {
		tk, err := s.Hub.TokenRequest(t.Context(), devstack.HubNamespace, sa, []string{devstack.Issuer}, 3600, nil)
		if err != nil {
			t.Fatal(err)
		}
		return tk
	}
	return s, tok("ui-admin"), tok("ui-viewer")
}

func applyHub(t *testing.T, s *devstack.Stack, objs ...runtime.Object) {
	t.Helper()
	c := s.Hub.Client
	for _, obj := range objs {
		var err error
		switch o := obj.(type) {
		case *rbacv1.ClusterRole:
			_, err = c.RbacV1().ClusterRoles().Create(t.Context(), o, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			_, err = c.RbacV1().ClusterRoleBindings().Create(t.Context(), o, metav1.CreateOptions{})
		case *rbacv1.Role:
			_, err = c.RbacV1().Roles(o.Namespace).Create(t.Context(), o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			_, err = c.RbacV1().RoleBindings(o.Namespace).Create(t.Context(), o, metav1.CreateOptions{})
		case *corev1.ServiceAccount:
			_, err = c.CoreV1().ServiceAccounts(o.Namespace).Create(t.Context(), o, metav1.CreateOptions{})
		default:
			t.Fatalf("cannot apply %T", obj)
		}
		if err != nil {
			t.Fatalf("apply %T: %v", obj, err)
		}
	}
}

// podReadable copies the crucible binary and the stack's CA where a dev
// pod, which runs as nobody, can use them: devstacktest builds the binary
// in a directory only its owner may enter.
func podReadable(t *testing.T, s *devstack.Stack) (bin, ca string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "crucible-ui-pod-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for src, mode := range map[string]os.FileMode{devstacktest.CrucibleBinary(t): 0o755, s.CAFile: 0o644} {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(src)), data, mode); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "crucible"), filepath.Join(dir, filepath.Base(s.CAFile))
}

// submitAPI submits a work pod through the API (not the UI) as token.
func submitAPI(t *testing.T, s *devstack.Stack, token string, req apiv1.SubmitRequest) string {
	t.Helper()
	body, _ := json.Marshal(req)
	r, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, s.Federation.ControllerInternalURL+"/api/pods", strings.NewReader(string(body)))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set(apiv1.ClientHeader, "ui-test")
	r.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var wp apiv1.WorkPod
	if err := json.NewDecoder(resp.Body).Decode(&wp); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("submit: %d %v", resp.StatusCode, err)
	}
	return wp.ID
}

// TestWebUI is issue 12's acceptance in chromium: the clusters healthy with
// a token expiry; a submit from the form; the pod appearing in an open list
// without a reload; its log while it runs; its end; its pushed artifact
// downloading with the pushed bytes; a viewer seeing no submit or cancel;
// the Capacity page (capacity_test.go); axe-core clean and a screenshot on
// every page.
func TestWebUI(t *testing.T) {
	chromiumPath(t) // before the stack: missing chromium fails (or skips under -short) at once
	s, adminToken, viewerToken := uiStack(t)
	url := s.Federation.ControllerInternalURL
	b := newBrowser(t, t.ArtifactDir())
	const adminUser = "system:serviceaccount:crucible:ui-admin"

	// Tab 1: the clusters, then the pod list left open.
	list := b.tab(t)
	signIn(t, list, url, adminToken, adminUser)
	// The controller's first probe can fail (the spokes' webhooks start after
	// it); it re-probes within seconds and the page reloads every 10 s. The
	// deadline is generous for a loaded machine, not an expected wait.
	waitJS(t, list, "both spokes healthy with a token expiry counting down", `(() => {
		const rows = [...document.querySelectorAll('tr[data-cluster]')];
		return rows.length === 2 && rows.every(c => c.querySelector('[data-testid=health]').textContent === 'healthy' &&
			/^in \d/.test((c.querySelector('[data-testid=token-countdown]') || {}).textContent || ''));
	})()`, 3*time.Minute)
	if got := eval[string](t, list, `document.querySelector('[data-detail=wharf] [data-testid=live-pods]').textContent`); got != "pending 0, dispatched 0, running 0" {
		t.Errorf("wharf's live pods: %q", got)
	}
	// wharf's view counts its GPU node's 4 GPUs, all free; dock has no GPUs.
	waitJS(t, list, "the free GPUs per spoke", `(() => {
		const cell = (name) => (document.querySelector('tr[data-cluster="' + name + '"] [data-testid=gpus-free]') || {}).textContent;
		return cell('wharf') === '4 of 4' && cell('dock') === 'none';
	})()`, time.Minute)
	first := eval[string](t, list, `document.querySelector('[data-testid=token-countdown]').textContent`)
	waitJS(t, list, "the countdown ticks", fmt.Sprintf(`document.querySelector('[data-testid=token-countdown]').textContent !== %q`, first), 5*time.Second)
	b.screenshot(t, list, "clusters")
	b.checkAxe(t, list, "clusters")
	noHorizontalScroll(t, list, "clusters")
	noLayoutShift(t, list, "clusters")
	capacityPage(t, b, list)

	run(t, list, "open the pod list", chromedp.Navigate(url+"/#/pods"))
	waitJS(t, list, "the list is live", `(document.getElementById('live-status')||{}).textContent === 'live'`, 30*time.Second)
	run(t, list, "mark the document", chromedp.Evaluate[chromedp.Void](`window.__noReload = true`))

	// Tab 2: submit from the form.
	form := b.tab(t)
	signIn(t, form, url, adminToken, adminUser)
	run(t, form, "open the form", chromedp.Navigate(url+"/#/submit"), chromedp.WaitVisible(chromedp.CSS("#s-image")))
	b.screenshot(t, form, "submit")
	b.checkAxe(t, form, "submit")
	noHorizontalScroll(t, form, "submit")
	noLayoutShift(t, form, "submit")
	const payload = "answer=42 from the UI test\n"
	bin, ca := podReadable(t, s)
	// The pod holds after its 60 lines until the test has seen them while it
	// runs (release): a busy machine may take longer than the lines do to
	// open the page, and the test must not depend on how long.
	release := filepath.Join(filepath.Dir(bin), "release")
	script := `for i in $(seq 1 60); do echo "line $i of the ui test"; sleep 0.2; done; ` +
		`while [ ! -e ` + release + ` ]; do sleep 0.2; done; ` +
		`printf 'answer=42 from the UI test\n' > "$HOME/result.txt"; ` + bin + ` push --ca-file ` + ca + ` result "$HOME/result.txt"`
	task := filepath.Join(t.TempDir(), "task.json")
	if err := os.WriteFile(task, []byte(`{"task": "ui"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, form, "fill the form",
		chromedp.SetUploadFiles(chromedp.CSS("#s-file-0"), []string{task}),
		chromedp.SetValue(chromedp.CSS("#s-cluster"), "dock"),
		chromedp.SendKeys(chromedp.CSS("#s-image"), "busybox"),
		chromedp.SetValue(chromedp.CSS("#s-command"), "sh\n-c\n"+script),
		chromedp.SetValue(chromedp.CSS("#s-env"), "GREETING=hello\nSECRET_THING=do-not-show"),
		chromedp.Click(chromedp.CSS("#s-go")))
	waitJS(t, form, "the form opens the new pod", `/^#\/pods\/turn-[a-z0-9]+$/.test(location.hash)`, time.Minute)
	id := strings.TrimPrefix(eval[string](t, form, `location.hash`), "#/pods/")

	// The open list shows it without a reload, and follows its state.
	waitJS(t, list, "the new pod in the open list", fmt.Sprintf(`!!document.querySelector('tr[data-pod=%q]') && window.__noReload === true`, id), 30*time.Second)

	// Its page: lines while it runs, then the end.
	waitJS(t, form, "log lines while the pod runs", `(() => {
		const st = (document.getElementById('pod-state') || {}).textContent;
		return st === 'running' && /^[1-9]\d* lines$/.test(document.getElementById('log-status').textContent) &&
			document.querySelectorAll('#log .logline').length > 0;
	})()`, 90*time.Second)
	b.screenshot(t, form, "pod-running")
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitJS(t, form, "the end state and exit code", `(document.getElementById('pod-state')||{}).textContent === 'succeeded' &&
		(document.getElementById('pod-exit')||{}).textContent === '0'`, 2*time.Minute)
	waitJS(t, form, "all 61 lines (60 and push's)", `document.getElementById('log-status').textContent === '61 lines'`, 30*time.Second)
	details := eval[string](t, form, `document.getElementById('pod-details').textContent`)
	if !strings.Contains(details, "GREETING, SECRET_THING") || strings.Contains(details, "do-not-show") || !strings.Contains(details, "Filestask.json") {
		t.Errorf("env and files on the pod page: want names only, got %q", details)
	}
	waitJS(t, list, "the list row follows to succeeded", fmt.Sprintf(`(document.querySelector('tr[data-pod=%q] .state')||{}).textContent === 'succeeded' && window.__noReload === true`, id), 30*time.Second)
	b.screenshot(t, list, "pods")
	b.checkAxe(t, list, "pods")
	noHorizontalScroll(t, list, "pods")
	noLayoutShift(t, list, "pods")

	// Search the log: only matching lines, marked.
	run(t, form, "search the log", chromedp.SendKeys(chromedp.CSS("#log-search"), "line 42 "))
	waitJS(t, form, "one line matches", `document.getElementById('log-status').textContent === '1 of 61 lines match' &&
		document.querySelector('#log mark').textContent === 'line 42 '`, 10*time.Second)

	// The pushed artifact downloads with the pushed bytes.
	waitJS(t, form, "the result artifact is listed", `!!document.querySelector('[data-download=result]')`, time.Minute)
	run(t, form, "download the result", chromedp.Click(chromedp.CSS("[data-download=result]")))
	if got := string(b.downloaded(t, id+"-result", 30*time.Second)); got != payload {
		t.Errorf("downloaded %q, want %q", got, payload)
	}
	b.screenshot(t, form, "pod")
	b.checkAxe(t, form, "pod")
	noHorizontalScroll(t, form, "pod")
	run(t, form, "dark", colorScheme("dark"))
	if bg := eval[string](t, form, `getComputedStyle(document.body).backgroundColor`); bg != "rgb(18, 18, 18)" {
		t.Errorf("dark page background %s", bg)
	}
	b.screenshot(t, form, "pod-dark")
	b.checkAxe(t, form, "pod (dark)")
	run(t, form, "light", colorScheme("light"))
	noLayoutShift(t, form, "pod")

	// A running pod: the admin may cancel it, the viewer sees no cancel and
	// no submit.
	sleeper := submitAPI(t, s, adminToken, apiv1.SubmitRequest{Cluster: "wharf", Image: "busybox", Command: []string{"sleep", "300"}})
	viewer := b.tab(t)
	signIn(t, viewer, url, viewerToken, "system:serviceaccount:crucible:ui-viewer")
	if hidden := eval[bool](t, viewer, `document.getElementById('nav-submit').hidden`); !hidden {
		t.Error("the viewer sees the Submit link")
	}
	run(t, viewer, "viewer opens the running pod", chromedp.Navigate(url+"/#/pods/"+sleeper))
	waitJS(t, viewer, "the viewer sees the pod running", `(document.getElementById('pod-state')||{}).textContent === 'running'`, time.Minute)
	if n := eval[int](t, viewer, `document.querySelectorAll('#cancel').length`); n != 0 {
		t.Error("the viewer sees the cancel button")
	}
	b.screenshot(t, viewer, "pod-viewer")
	run(t, viewer, "viewer opens the form", chromedp.Navigate(url+"/#/submit"))
	waitJS(t, viewer, "the viewer may not submit", `document.getElementById('main').textContent.includes('You may not submit') && !document.getElementById('s-image')`, 10*time.Second)

	// The viewer opens the pod again, its streams held back: the page must
	// read the pod only once its change stream is open, or the cancel below,
	// made while the streams are held, never reaches it (a read before the
	// subscription misses what happens in between: ci4's waiting pod, whose
	// log did not end to make the page look again — the log stream stays held
	// here for that reason).
	run(t, viewer, "hold the viewer's streams", chromedp.Evaluate[chromedp.Void](holdStreams))
	run(t, viewer, "viewer opens the pod, its stream held", chromedp.Evaluate[chromedp.Void](`location.hash = '#/pods/`+sleeper+`'`))
	waitJS(t, viewer, "the pod page asks for its change stream", `window.__held.some((h) => h.url.startsWith('/api/events'))`, 30*time.Second)

	run(t, form, "admin opens the running pod", chromedp.Navigate(url+"/#/pods/"+sleeper))
	waitJS(t, form, "the admin sees cancel", `(document.getElementById('pod-state')||{}).textContent === 'running' && !!document.getElementById('cancel')`, time.Minute)
	run(t, form, "cancel, with confirmation", chromedp.Click(chromedp.CSS("#cancel")), chromedp.WaitVisible(chromedp.CSS("#cancel-dialog")))
	b.checkAxe(t, form, "cancel dialog")
	run(t, form, "confirm", chromedp.Click(chromedp.CSS("#cancel-confirm")))
	waitJS(t, form, "cancelled", `(document.getElementById('pod-state')||{}).textContent === 'cancelled' && !document.getElementById('cancel')`, time.Minute)
	run(t, viewer, "let the viewer's change stream open", chromedp.Evaluate[chromedp.Void](`window.__release('/api/events')`))
	waitJS(t, viewer, "the viewer sees the cancel made while its streams were held", `(document.getElementById('pod-state')||{}).textContent === 'cancelled'`, time.Minute)
	run(t, viewer, "let the log stream open", chromedp.Evaluate[chromedp.Void](`window.__release('')`))
}

// holdStreams makes the page's GET /api/events and log streams wait until
// window.__release(prefix) lets those whose path starts with prefix go (and
// later ones through).
const holdStreams = `(() => {
  const real = window.fetch;
  const held = (url) => url.startsWith('/api/events') || /^\/api\/pods\/[^/]+\/logs/.test(url);
  const open = [];
  window.__held = [];
  window.fetch = (input, init) => {
    const url = typeof input === 'string' ? input : input.url;
    if (!held(url) || open.some((p) => url.startsWith(p))) return real(input, init);
    return new Promise((go) => window.__held.push({ url, go })).then(() => real(input, init));
  };
  window.__release = (prefix) => {
    open.push(prefix);
    window.__held = window.__held.filter((h) => !h.url.startsWith(prefix) || (h.go(), false));
  };
})()`

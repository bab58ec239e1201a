package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/apiauth"
	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/store"
	"crucible.dev/crucible/internal/store/storetest"
	"crucible.dev/crucible/internal/workpod"
)

// fakeAuthn knows tokens by value, each naming "user" or "user|groups";
// "down" is a hub that cannot answer.
type fakeAuthn map[string]string

func (f fakeAuthn) Authenticate(r *http.Request) (apiauth.Identity, error) {
	tok, err := apiauth.BearerToken(r.Header)
	if err != nil {
		return apiauth.Identity{}, err
	}
	if tok == "down" {
		return apiauth.Identity{}, fmt.Errorf("%w: hub unreachable", apiauth.ErrUnavailable)
	}
	user, ok := f[tok]
	if !ok {
		return apiauth.Identity{}, fmt.Errorf("%w: the hub did not accept the token", apiauth.ErrUnauthenticated)
	}
	user, groups, _ := strings.Cut(user, "|") // "user|group,group"
	id := apiauth.Identity{User: user}
	if groups != "" {
		id.Groups = strings.Split(groups, ",")
	}
	return id, nil
}

// fakeAuthz allows "user verb[/sub] cluster" lines; cluster "*" matches any
// cluster (an unscoped grant). It records what it was asked.
type fakeAuthz struct {
	mu      sync.Mutex
	allowed map[string]bool
	asked   []string
}

func (f *fakeAuthz) Authorize(_ context.Context, id apiauth.Identity, a apiauth.Attributes) error {
	verb := a.Verb
	if a.Subresource != "" {
		verb += "/" + a.Subresource
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, id.User+" "+verb+" "+a.Cluster)
	if id.User == "flaky" {
		return fmt.Errorf("%w: hub unreachable", apiauth.ErrUnavailable)
	}
	if f.allowed[id.User+" "+verb+" "+a.Cluster] || f.allowed[id.User+" "+verb+" *"] {
		return nil
	}
	return fmt.Errorf("%w: %s may not %s", apiauth.ErrForbidden, id.User, a)
}

func (f *fakeAuthz) lastAsked() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.asked) == 0 {
		return ""
	}
	return f.asked[len(f.asked)-1]
}

type fixture struct {
	srv   *Server
	mux   *http.ServeMux
	authz *fakeAuthz
	log   *bytes.Buffer
	st    *storetest.Faulty
	arts  *fakeArtifacts
	disp  *fakeDispatcher
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	st, arts, disp := &storetest.Faulty{Store: storetest.SQLite(t)}, &fakeArtifacts{}, &fakeDispatcher{}
	authz := &fakeAuthz{allowed: map[string]bool{
		"viewer list ": true, "viewer list wharf": true, "viewer get wharf": true, "viewer get/log wharf": true, "viewer get/artifacts wharf": true,
		"submitter create *": true,
		"dockonly get dock":  true,
		"admin create *":     true, "admin list *": true, "admin get *": true, "admin delete *": true,
		"admin get/log *": true, "admin get/artifacts *": true,
	}}
	var logBuf bytes.Buffer
	s := New(Options{
		Profile: profile.NewCurrent(testProfile(profile.ClusterEntry{Name: "wharf", LoopNamespace: "loops"}, profile.ClusterEntry{Name: "dock", LoopNamespace: "loops"})),
		Store:   st, Artifacts: arts, Dispatcher: disp,
		DispatchTimeout: 10 * time.Second,
		Log:             slog.New(slog.NewTextHandler(&logBuf, nil)),
		MaxRequestBytes: 1 << 20,
		Authn:           fakeAuthn{"tok-viewer": "viewer", "tok-submitter": "submitter", "tok-nobody": "nobody", "tok-flaky": "flaky", "tok-dock": "dockonly", "tok-admin": "admin"},
		Authz:           authz,
		AllowedHosts:    profile.DefaultAPIAllowedHosts(),
		PageSize:        3,
	})
	mux := http.NewServeMux()
	s.Routes(mux)
	return &fixture{srv: s, mux: mux, authz: authz, log: &logBuf, st: st, arts: arts, disp: disp}
}

// req describes one request; zero fields take the well-behaved CLI's values.
type req struct {
	method, path, host, token, body string
	header                          map[string]string
	noJSON, noClient                bool
}

func (f *fixture) do(t *testing.T, q req) *httptest.ResponseRecorder {
	t.Helper()
	if q.method == "" {
		q.method = http.MethodGet
	}
	var body io.Reader
	if q.body != "" {
		body = strings.NewReader(q.body)
	}
	r := httptest.NewRequest(q.method, "http://127.0.0.1:8080"+q.path, body)
	if q.host != "" {
		r.Host = q.host
	}
	if q.token != "" {
		r.Header.Set("Authorization", "Bearer "+q.token)
	}
	if q.method == http.MethodPost {
		if !q.noJSON {
			r.Header.Set("Content-Type", "application/json")
		}
		if !q.noClient {
			r.Header.Set(apiv1.ClientHeader, "test")
		}
	}
	for k, v := range q.header {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	f.mux.ServeHTTP(w, r)
	return w
}

func (f *fixture) row(t *testing.T, id, cluster string) {
	t.Helper()
	_, err := f.srv.Store.CreateWorkPod(t.Context(), store.WorkPod{ID: id, Cluster: cluster, Namespace: "loops", Kind: "turn",
		State: store.StateRunning, Spec: []byte(`{"image":"busybox"}`), Submitter: "alice"})
	if err != nil {
		t.Fatal(err)
	}
}

// artifact records content as artifact kind of pod, as the drop-box does.
func (f *fixture) artifact(t *testing.T, pod, kind, content string) {
	t.Helper()
	f.artifactFrom(t, pod, kind, content, store.SourcePod)
}

// artifactFrom records content as artifact kind of pod, written by src.
func (f *fixture) artifactFrom(t *testing.T, pod, kind, content string, src store.Source) {
	t.Helper()
	sum := sha256.Sum256([]byte(content))
	digest := hex.EncodeToString(sum[:])
	f.arts.put(pod, kind, digest, []byte(content))
	a := store.Artifact{PodID: pod, Kind: kind, Size: int64(len(content)), SHA256: digest, Source: src}
	if _, err := f.st.PutArtifact(t.Context(), a, store.Quota{}); err != nil {
		t.Fatal(err)
	}
}

func errorOf(t *testing.T, w *httptest.ResponseRecorder) string {
	t.Helper()
	var e struct{ Error, Field string }
	if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil {
		t.Fatalf("error body %q: %v", w.Body.String(), err)
	}
	return e.Error
}

func TestGuardDecisions(t *testing.T) {
	const submitBody = `{"image":"busybox","cluster":"nope"}`
	tests := []struct {
		name      string
		req       req
		wantCode  int
		wantError string
		wantAsked string // the last authorization question, "" for none
	}{
		{"no token", req{path: "/api/pods"}, 401, "unauthenticated: no bearer token (Authorization: Bearer <hub token>)", ""},
		{"garbled Authorization", req{path: "/api/pods", header: map[string]string{"Authorization": "Bearer a b"}}, 401,
			"unauthenticated: bearer token has a character outside printable ASCII", ""},
		{"huge Authorization", req{path: "/api/pods", header: map[string]string{"Authorization": "Bearer " + strings.Repeat("x", 20000)}}, 401,
			"unauthenticated: bearer token over 16384 bytes", ""},
		{"forged token", req{path: "/api/pods", token: "forged"}, 401, "unauthenticated: the hub did not accept the token", ""},
		{"hub down at authentication", req{path: "/api/pods", token: "down"}, 503, "cannot check your identity or permissions right now; retry later", ""},
		{"hub down at authorization", req{path: "/api/pods", token: "tok-flaky"}, 503, "cannot check your identity or permissions right now; retry later", "flaky list "},
		{"no RBAC list", req{path: "/api/pods", token: "tok-nobody"}, 403, "forbidden: nobody may not list workpods.crucible.dev", "nobody list "},
		{"no RBAC submit", req{method: "POST", path: "/api/pods", token: "tok-nobody", body: `{"image":"busybox"}`}, 403,
			"forbidden: nobody may not create workpods.crucible.dev wharf", "nobody create wharf"},
		{"viewer lists", req{path: "/api/pods", token: "tok-viewer"}, 200, "", "viewer list "},
		{"viewer lists a cluster", req{path: "/api/pods?cluster=wharf", token: "tok-viewer"}, 200, "", "viewer list wharf"},
		{"viewer cannot submit", req{method: "POST", path: "/api/pods", token: "tok-viewer", body: `{"image":"busybox"}`}, 403,
			"forbidden: viewer may not create workpods.crucible.dev wharf", "viewer create wharf"},
		{"viewer cannot cancel", req{method: "POST", path: "/api/pods/p-wharf/cancel", token: "tok-viewer"}, 403,
			"forbidden: viewer may not delete workpods.crucible.dev wharf", "viewer delete wharf"},
		{"unknown cluster hidden from the unauthorized", req{method: "POST", path: "/api/pods", token: "tok-nobody", body: submitBody}, 403,
			"forbidden: nobody may not create workpods.crucible.dev nope", "nobody create nope"},
		{"submitter past authorization", req{method: "POST", path: "/api/pods", token: "tok-submitter", body: submitBody}, 400,
			`cluster "nope": no such cluster (known: wharf, dock)`, "submitter create nope"},
		{"viewer reads a pod of wharf", req{path: "/api/pods/p-wharf", token: "tok-viewer"}, 200, "", "viewer get wharf"},
		{"viewer of wharf cannot read dock", req{path: "/api/pods/p-dock", token: "tok-viewer"}, 403,
			"forbidden: viewer may not get workpods.crucible.dev dock", "viewer get dock"},
		{"unknown pod checked against every cluster", req{path: "/api/pods/nope-1", token: "tok-dock"}, 403,
			"forbidden: dockonly may not get workpods.crucible.dev", "dockonly get "},
		{"viewer artifacts", req{path: "/api/pods/p-wharf/artifacts", token: "tok-viewer"}, 200, "", "viewer get/artifacts wharf"},
		{"catch-all needs a token", req{path: "/api/nothing"}, 401, "unauthenticated: no bearer token (Authorization: Bearer <hub token>)", ""},
		{"catch-all with a token", req{path: "/api/nothing", token: "tok-nobody"}, 404, "no such endpoint: GET /api/nothing", ""},
		// Every mode's protections come before authentication.
		{"foreign Host", req{path: "/api/pods", host: "evil.example:8080", token: "tok-viewer"}, 421,
			`Host "evil.example:8080" is not one this API answers to (api.allowed_hosts)`, ""},
		{"DNS-rebinding Host", req{path: "/api/pods", host: "127.0.0.1.rebind.example", token: "tok-viewer"}, 421,
			`Host "127.0.0.1.rebind.example" is not one this API answers to (api.allowed_hosts)`, ""},
		{"huge Host", req{path: "/api/pods", host: strings.Repeat("h", 5000), token: "tok-viewer"}, 421,
			`Host "` + strings.Repeat("h", 100) + `…" is not one this API answers to (api.allowed_hosts)`, ""},
		{"localhost Host", req{path: "/api/pods", host: "LOCALHOST:9", token: "tok-viewer"}, 200, "", "viewer list "},
		{"IPv6 loopback Host", req{path: "/api/pods", host: "[::1]:8080", token: "tok-viewer"}, 200, "", "viewer list "},
		{"POST without Content-Type", req{method: "POST", path: "/api/pods", token: "tok-submitter", body: submitBody, noJSON: true}, 415,
			"Content-Type must be application/json, not none", ""},
		{"POST as a form", req{method: "POST", path: "/api/pods", token: "tok-submitter", body: submitBody, noJSON: true,
			header: map[string]string{"Content-Type": "text/plain"}}, 415, "Content-Type must be application/json, not text/plain", ""},
		{"cancel without Content-Type", req{method: "POST", path: "/api/pods/p-wharf/cancel", token: "tok-submitter", noJSON: true}, 415,
			"Content-Type must be application/json, not none", ""},
		{"JSON with charset", req{method: "POST", path: "/api/pods", token: "tok-submitter", body: submitBody, noJSON: true,
			header: map[string]string{"Content-Type": "application/json; charset=utf-8"}}, 400, `cluster "nope": no such cluster (known: wharf, dock)`, "submitter create nope"},
		{"cross-site POST", req{method: "POST", path: "/api/pods", token: "tok-submitter", body: submitBody,
			header: map[string]string{"Sec-Fetch-Site": "cross-site"}}, 403, "cross-site request refused (Sec-Fetch-Site: cross-site)", ""},
		{"same-site POST", req{method: "POST", path: "/api/pods", token: "tok-submitter", body: submitBody,
			header: map[string]string{"Sec-Fetch-Site": "same-site"}}, 403, "cross-site request refused (Sec-Fetch-Site: same-site)", ""},
		{"POST without the client header", req{method: "POST", path: "/api/pods", token: "tok-submitter", body: submitBody, noClient: true}, 403,
			"state-changing requests need the X-Crucible-Client header", ""},
		{"same-origin browser POST", req{method: "POST", path: "/api/pods", token: "tok-submitter", body: submitBody, noClient: true,
			header: map[string]string{"Sec-Fetch-Site": "same-origin"}}, 400, `cluster "nope": no such cluster (known: wharf, dock)`, "submitter create nope"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.row(t, "p-wharf", "wharf")
			f.row(t, "p-dock", "dock")
			w := f.do(t, tc.req)
			if w.Code != tc.wantCode {
				t.Fatalf("code = %d, want %d; body %s", w.Code, tc.wantCode, w.Body)
			}
			if tc.wantError != "" {
				if got := errorOf(t, w); got != tc.wantError {
					t.Errorf("error = %q, want %q", got, tc.wantError)
				}
			}
			if got := f.authz.lastAsked(); got != tc.wantAsked {
				t.Errorf("last authorization = %q, want %q", got, tc.wantAsked)
			}
			switch tc.wantCode {
			case 503:
				if w.Header().Get("Retry-After") == "" {
					t.Error("503 without Retry-After")
				}
			case 401:
				if w.Header().Get("WWW-Authenticate") != `Bearer realm="crucible"` {
					t.Errorf("WWW-Authenticate = %q", w.Header().Get("WWW-Authenticate"))
				}
			}
			// Nothing refused ever changes the store.
			rows, err := f.srv.Store.ListWorkPods(t.Context(), store.Filter{})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range rows {
				if p.State != store.StateRunning {
					t.Errorf("%s is %s after a refused request", p.ID, p.State)
				}
			}
			if len(rows) != 2 {
				t.Errorf("%d rows, want the 2 of the fixture", len(rows))
			}
		})
	}
}

func TestGetShowsSubmitterAndLogsChanges(t *testing.T) {
	f := newFixture(t)
	f.row(t, "p-wharf", "wharf")
	w := f.do(t, req{path: "/api/pods/p-wharf", token: "tok-viewer"})
	var wp apiv1.WorkPod
	if err := json.Unmarshal(w.Body.Bytes(), &wp); err != nil || wp.Submitter != "alice" || wp.Image != "busybox" {
		t.Fatalf("get: %+v, %v", wp, err)
	}
	f.do(t, req{method: "POST", path: "/api/pods/p-wharf/cancel", token: "tok-viewer"})
	log := f.log.String()
	if !strings.Contains(log, `msg="api change" method=POST path=/api/pods/p-wharf/cancel user=viewer code=403`) {
		t.Errorf("no audit line with the identity in:\n%s", log)
	}
	if strings.Contains(log, "tok-viewer") {
		t.Errorf("the token reached the log:\n%s", log)
	}
}

func TestArtifactDownloadHeaders(t *testing.T) {
	f := newFixture(t)
	f.row(t, "p-wharf", "wharf")
	f.artifact(t, "p-wharf", "report", "<script>alert(1)</script>")
	w := f.do(t, req{path: "/api/pods/p-wharf/artifacts/report", token: "tok-viewer"})
	if w.Code != 200 || w.Body.String() != "<script>alert(1)</script>" {
		t.Fatalf("download: %d %q", w.Code, w.Body)
	}
	want := map[string]string{"Content-Disposition": "attachment", "Content-Security-Policy": "sandbox", "X-Content-Type-Options": "nosniff"}
	for k, v := range want {
		if got := w.Header().Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if got := f.authz.lastAsked(); got != "viewer get/artifacts wharf" {
		t.Errorf("authorized as %q", got)
	}
}

func TestRouteWithoutRuleRefused(t *testing.T) {
	f := newFixture(t)
	f.mux.Handle("GET /api/secret", f.srv.handle(func(w http.ResponseWriter, _ *http.Request) error {
		writeJSON(w, 200, "leaked")
		return nil
	}))
	w := f.do(t, req{path: "/api/secret", token: "tok-viewer"})
	if w.Code != 403 || errorOf(t, w) != "no authorization rule for GET /api/secret" {
		t.Fatalf("route without a rule: %d %s", w.Code, w.Body)
	}
}

func TestListPages(t *testing.T) {
	f := newFixture(t)
	var want []string
	for i := range 7 {
		id := fmt.Sprintf("p-%d", i)
		f.row(t, id, "wharf")
		want = append([]string{id}, want...)
	}
	var got []string
	path := "/api/pods"
	for pages := 0; ; pages++ {
		if pages > 3 {
			t.Fatal("more than 3 pages of 3 for 7 rows")
		}
		w := f.do(t, req{path: path, token: "tok-viewer"})
		var rows []apiv1.WorkPod
		if err := json.Unmarshal(w.Body.Bytes(), &rows); err != nil || w.Code != 200 {
			t.Fatalf("page: %d %s", w.Code, w.Body)
		}
		if len(rows) > 3 {
			t.Fatalf("page of %d rows, page size 3", len(rows))
		}
		for _, r := range rows {
			got = append(got, r.ID)
			if r.Image != "" {
				t.Errorf("list view shows image %q: the spec was read", r.Image)
			}
		}
		next := w.Header().Get(apiv1.ContinueHeader)
		if next == "" {
			break
		}
		path = "/api/pods?continue=" + next
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ids over all pages (-want +got):\n%s", diff)
	}
	w := f.do(t, req{path: "/api/pods?limit=7", token: "tok-viewer"})
	if w.Header().Get(apiv1.ContinueHeader) != "" {
		t.Error("a page holding every row has a continue token")
	}
	for _, bad := range []struct{ query, want string }{
		{"limit=0", "limit \"0\": must be a number from 1 to 10000"},
		{"limit=10001", "limit \"10001\": must be a number from 1 to 10000"},
		{"limit=" + strings.Repeat("9", 40), "limit \"" + strings.Repeat("9", 20) + "…\": must be a number from 1 to 10000"},
		{"continue=!!!", "continue: not a token this API issued"},
		{"continue=bm90LWEtdG9rZW4", "continue: not a token this API issued"},                // "not-a-token"
		{"continue=LTEvcC0x", "continue: not a token this API issued"},                       // "-1/p-1"
		{"continue=MTIz", "continue: not a token this API issued"},                           // "123"
		{"continue=" + strings.Repeat("A", 600), "continue: not a token this API issued"},    // oversized
		{"continue=OTk5OTk5OTk5OTk5OTk5OTk5OTkvcA", "continue: not a token this API issued"}, // overflows int64
	} {
		w := f.do(t, req{path: "/api/pods?" + bad.query, token: "tok-viewer"})
		if w.Code != 400 {
			t.Errorf("%s: %d, want 400", bad.query, w.Code)
		} else if bad.want != "" && errorOf(t, w) != bad.want {
			t.Errorf("%s: %q, want %q", bad.query, errorOf(t, w), bad.want)
		}
	}
}

func TestSpecForStoreKeepsOnlyDigests(t *testing.T) {
	wp := renderWorkPodWithSecrets()
	raw, err := workpod.EncodeStored(wp, []byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte("hunter2")) || bytes.Contains(raw, []byte("f52fbd32b2b3b86ff88ef6c490628285f482af15ddcb29541f94bcf526a3f6c7")) {
		t.Fatalf("secret value stored: %s", raw)
	}
	var got map[string]any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	// HMAC-SHA256("hunter2") under the key; the bare SHA-256 (f52fbd…) would
	// let a reader of the row test guesses offline.
	want := map[string]any{"token": "hmac-sha256:3920d54ec70f500ee54e1da041d2364a8e57dd252f7a81ed8acd58ad6cf3b6d0"}
	if diff := cmp.Diff(want, got["secret_digests"]); diff != "" {
		t.Errorf("digests (-want +got):\n%s", diff)
	}
	if _, ok := got["secret_files"]; ok {
		t.Error("secret_files key kept")
	}
	if got["image"] != "busybox" {
		t.Errorf("image = %v", got["image"])
	}
}

func renderWorkPodWithSecrets() workpod.WorkPod {
	return workpod.WorkPod{ID: "turn-1", Kind: "turn", Image: "busybox", SecretFiles: map[string]string{"token": "hunter2"}}
}

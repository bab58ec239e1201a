package ui

import (
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func serve(t *testing.T, path string) *httptest.ResponseRecorder {
	t.Helper()
	return serveRequest(t, httptest.NewRequest(http.MethodGet, path, nil))
}

func serveRequest(t *testing.T, r *http.Request) *httptest.ResponseRecorder {
	t.Helper()
	mux := http.NewServeMux()
	Routes(mux)
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, r)
	return w
}

func TestPageAndAssets(t *testing.T) {
	tests := []struct {
		path, wantType string
		wantCode       int
	}{
		{"/", "text/html; charset=utf-8", 200},
		{"/ui/app.css", "text/css; charset=utf-8", 200},
		{"/ui/js/main.js", "text/javascript; charset=utf-8", 200},
		{"/ui/favicon.svg", "image/svg+xml", 200},
		{"/ui/", "", 404},           // no listing
		{"/ui/js/", "", 404},        // no listing
		{"/ui/index.html", "", 404}, // the page is at / only
		{"/ui/nope.js", "", 404},
		{"/ui/../ui.go", "", 404},
		{"/ui/%2e%2e/ui.go", "", 404},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			w := serve(t, tt.path)
			if redirected := w.Code == 301 || w.Code == 307; w.Code != tt.wantCode && (tt.wantCode != 404 || !redirected) { // a redirect to a cleaned path, which 404s
				t.Fatalf("code %d, want %d", w.Code, tt.wantCode)
			}
			if tt.wantCode != 200 {
				if strings.Contains(w.Body.String(), "package ui") {
					t.Fatal("served Go source")
				}
				return
			}
			if got := w.Header().Get("Content-Type"); got != tt.wantType {
				t.Errorf("Content-Type %q, want %q", got, tt.wantType)
			}
			if got := w.Header().Get("Content-Security-Policy"); got != ContentSecurityPolicy {
				t.Errorf("CSP %q", got)
			}
			for k, v := range map[string]string{"X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer"} {
				if got := w.Header().Get(k); got != v {
					t.Errorf("%s %q, want %q", k, got, v)
				}
			}
		})
	}
}

func TestCSPIsStrict(t *testing.T) {
	for _, must := range []string{"default-src 'self'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'", "object-src 'none'"} {
		if !strings.Contains(ContentSecurityPolicy, must) {
			t.Errorf("CSP lacks %q", must)
		}
	}
	if strings.Contains(ContentSecurityPolicy, "unsafe") {
		t.Error("CSP allows something unsafe")
	}
}

// The assets keep the rules the CSP and the escaping depend on: nothing
// fetched from elsewhere, no inline script or style, data never as HTML.
func TestAssetsFollowTheRules(t *testing.T) {
	external := regexp.MustCompile(`(?i)(src|href)\s*=\s*["']?(https?:)?//`)
	urlInCode := regexp.MustCompile(`https?://`)
	forbidden := []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"}
	n := 0
	err := fs.WalkDir(static, "static", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		n++
		b, err := static.ReadFile(path)
		if err != nil {
			return err
		}
		s := string(b)
		if external.MatchString(s) {
			t.Errorf("%s refers to another origin", path)
		}
		if strings.HasSuffix(path, ".js") {
			// SVG's namespace names the kind of element, fetches nothing.
			if m := urlInCode.FindString(strings.ReplaceAll(s, "'http://www.w3.org/2000/svg'", "")); m != "" {
				t.Errorf("%s has a URL to elsewhere: %s", path, m)
			}
			for _, f := range forbidden {
				if strings.Contains(s, f) {
					t.Errorf("%s uses %s", path, f)
				}
			}
		}
		if strings.HasSuffix(path, ".html") {
			if regexp.MustCompile(`<script(?:[^>]*)>\s*[^<\s]`).MatchString(s) {
				t.Errorf("%s has an inline script", path)
			}
			if strings.Contains(s, "style=") || strings.Contains(s, "<style") || regexp.MustCompile(`\son[a-z]+=`).MatchString(s) {
				t.Errorf("%s has an inline style or handler", path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 8 {
		t.Fatalf("only %d assets embedded", n)
	}
}

// TestEveryModuleIsPreloaded: the page names every module besides main.js
// as a modulepreload, and only modules that exist, so that a new module
// joins the page's one round of fetches instead of adding a round of its
// own after its importer has loaded.
func TestEveryModuleIsPreloaded(t *testing.T) {
	page, err := static.ReadFile("static/index.html")
	if err != nil {
		t.Fatal(err)
	}
	preloaded := map[string]bool{}
	for _, m := range regexp.MustCompile(`<link rel="modulepreload" href="/ui/js/([a-z]+\.js)">`).FindAllStringSubmatch(string(page), -1) {
		preloaded[m[1]] = true
	}
	modules, err := fs.Glob(static, "static/js/*.js")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range modules {
		name := strings.TrimPrefix(path, "static/js/")
		if name != "main.js" && !preloaded[name] {
			t.Errorf("index.html does not preload %s", name)
		}
		delete(preloaded, name)
	}
	for name := range preloaded {
		t.Errorf("index.html preloads %s, which is not embedded", name)
	}
}

// TestAssetsRevalidate: an asset carries an ETag, a revalidation with it
// is answered 304 with no body, and one with another tag (an older
// binary's) gets the asset whole.
func TestAssetsRevalidate(t *testing.T) {
	get := func(ifNoneMatch string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, "/ui/js/main.js", nil)
		if ifNoneMatch != "" {
			r.Header.Set("If-None-Match", ifNoneMatch)
		}
		return serveRequest(t, r)
	}
	first := get("")
	tag := first.Header().Get("ETag")
	if first.Code != http.StatusOK || !regexp.MustCompile(`^"[0-9a-f]{32}"$`).MatchString(tag) {
		t.Fatalf("first GET: %d, ETag %q", first.Code, tag)
	}
	if again := get(tag); again.Code != http.StatusNotModified || again.Body.Len() != 0 {
		t.Errorf("GET with its ETag: %d, %d bytes; want 304, none", again.Code, again.Body.Len())
	}
	if other := get(`"00000000000000000000000000000000"`); other.Code != http.StatusOK || other.Body.Len() != first.Body.Len() {
		t.Errorf("GET with another ETag: %d, %d bytes; want 200, %d", other.Code, other.Body.Len(), first.Body.Len())
	}
	if css := serve(t, "/ui/app.css").Header().Get("ETag"); css == "" || css == tag {
		t.Errorf("app.css ETag %q (main.js %q): want its own", css, tag)
	}
}

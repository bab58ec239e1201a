// Package ui serves crucible's web UI (R-C9) on the controller's internal
// listener: `/` is the page, `/ui/...` its assets, every byte embedded in the
// binary so that nothing outside is ever fetched. The UI is plain HTML, CSS
// and JavaScript modules with no build step; it uses only the public API
// (/api/...), which authenticates and authorizes every request on its own —
// what the UI hides for lack of a right, the API refuses anyway.
package ui

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"strings"

	"crucible.dev/crucible/internal/httperr"
)

//go:embed static
var static embed.FS

// ContentSecurityPolicy is sent with every UI response: scripts, styles,
// fetches and images from this origin only, no inline script or style, no
// framing, no plugins, forms only back to this origin.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"

// Routes registers the page at / and the assets under /ui/.
func Routes(mux *http.ServeMux) {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files, tags := http.FileServerFS(sub), etags(sub)
	assets := http.StripPrefix("/ui/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tag, ok := tags[r.URL.Path]; ok {
			// The file server then answers a revalidation 304 (an embedded
			// file has no modification time to answer it by).
			w.Header().Set("ETag", tag)
		}
		files.ServeHTTP(w, r)
	}))
	mux.Handle("GET /ui/", secured(edge.Handle(func(w http.ResponseWriter, r *http.Request) error {
		if strings.HasSuffix(r.URL.Path, "/") || r.URL.Path == "/ui/index.html" {
			// No directory listings; the page is at /. The file server's 404, byte for byte.
			return httperr.New(http.StatusNotFound, "404 page not found")
		}
		w.Header().Set("Cache-Control", "no-cache") // revalidated: a new binary's assets show at once
		assets.ServeHTTP(w, r)
		return nil
	})))
	mux.Handle("GET /{$}", secured(edge.Handle(func(w http.ResponseWriter, r *http.Request) error {
		page, err := fs.ReadFile(sub, "index.html")
		if err != nil {
			return httperr.Wrap(http.StatusInternalServerError, "the web UI is missing from this binary", err)
		}
		w.Header().Set("Cache-Control", "no-cache")
		httperr.WriteBody(w, r, http.StatusOK, "text/html; charset=utf-8", page)
		return nil
	})))
}

// etags is every embedded asset's strong ETag, by path: a hash of its
// bytes, which change only with the binary.
func etags(sub fs.FS) map[string]string {
	tags := map[string]string{}
	err := fs.WalkDir(sub, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(sub, path)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		tags[path] = `"` + hex.EncodeToString(sum[:16]) + `"`
		return nil
	})
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return tags
}

// edge answers in text, as the file server does: the UI's own requests
// are for assets, whose refusals nobody parses. Its one failure, a binary
// built without the UI, needs no log to be found.
var edge = httperr.Edge{Format: httperr.Text}

// secured adds the headers every UI response carries.
func secured(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", ContentSecurityPolicy)
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Referrer-Policy", "no-referrer")
		h.ServeHTTP(w, r)
	})
}

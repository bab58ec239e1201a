package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// dropBox is a stand-in for the controller's drop-box: answer decides each
// try's status and headers; every try is recorded.
type dropBox struct {
	mu     sync.Mutex
	tries  []try
	answer func(n int, w http.ResponseWriter, body []byte)
}

type try struct {
	at    time.Time
	path  string
	token string
	body  []byte
}

func (d *dropBox) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	d.mu.Lock()
	d.tries = append(d.tries, try{at: time.Now(), path: r.URL.Path, token: strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), body: body})
	n := len(d.tries)
	d.mu.Unlock()
	d.answer(n, w, body)
}

func (d *dropBox) all() []try {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]try(nil), d.tries...)
}

func stored(code int) func(int, http.ResponseWriter, []byte) {
	return func(_ int, w http.ResponseWriter, body []byte) { answerStored(w, code, body) }
}

func answerStored(w http.ResponseWriter, code int, body []byte) {
	sum := sha256.Sum256(body)
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"pod": "turn-1", "kind": "result", "size": len(body), "sha256": hex.EncodeToString(sum[:])})
}

func refuse(code int, msg string, hdr ...string) func(int, http.ResponseWriter, []byte) {
	return func(_ int, w http.ResponseWriter, _ []byte) {
		for i := 0; i+1 < len(hdr); i += 2 {
			w.Header().Set(hdr[i], hdr[i+1])
		}
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
	}
}

type pushEnv struct {
	box       *dropBox
	srv       *httptest.Server
	tokenFile string
	file      string
	content   []byte
}

func newPushEnv(t *testing.T, answer func(int, http.ResponseWriter, []byte)) *pushEnv {
	t.Helper()
	e := &pushEnv{box: &dropBox{answer: answer}, content: []byte("{\"score\": 0.93}\n")}
	e.srv = httptest.NewServer(e.box)
	t.Cleanup(e.srv.Close)
	dir := t.TempDir()
	e.tokenFile = filepath.Join(dir, "token")
	e.file = filepath.Join(dir, "out.json")
	if err := os.WriteFile(e.tokenFile, []byte("token-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.file, e.content, 0o600); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *pushEnv) run(t *testing.T, extra ...string) (string, error) {
	t.Helper()
	args := append([]string{"push", "--url", e.srv.URL, "--pod", "turn-1", "--token-file", e.tokenFile, "--timeout", "20s"}, extra...)
	var out, errOut bytes.Buffer
	err := Run(t.Context(), args, &out, &errOut)
	return out.String(), err
}

func exitCode(err error) int {
	var ee *ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	if err != nil {
		return -1
	}
	return 0
}

func TestPushStored(t *testing.T) {
	for _, code := range []int{201, 200} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			e := newPushEnv(t, stored(code))
			out, err := e.run(t, "result", e.file)
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(e.content)
			verb := map[int]string{201: "stored", 200: "already stored"}[code]
			want := fmt.Sprintf("%s turn-1/result: %d bytes sha256:%x\n", verb, len(e.content), sum)
			if out != want {
				t.Errorf("output %q, want %q", out, want)
			}
			tries := e.box.all()
			if len(tries) != 1 || tries[0].path != "/api/pods/turn-1/artifacts/result" || tries[0].token != "token-1" || !bytes.Equal(tries[0].body, e.content) {
				t.Errorf("tries %+v", tries)
			}
		})
	}
}

func TestPushRefusals(t *testing.T) {
	cases := []struct {
		name   string
		answer func(int, http.ResponseWriter, []byte)
		want   string
	}{
		{"409", refuse(409, "kind result already stored with different bytes"), "a different artifact of this kind is already stored"},
		{"401", refuse(401, "token rejected"), "the drop-box refused this pod's token (401)"},
		{"403", refuse(403, "token not bound to this pod"), "the drop-box refused this pod's token (403)"},
		{"413", refuse(413, "body over 100 bytes"), "too large for the drop-box (413"},
		{"400", refuse(400, "kind is controller-owned"), "kind is controller-owned"},
		{"404 not json", func(_ int, w http.ResponseWriter, _ []byte) { http.NotFound(w, nil) }, "404 page not found"},
		{"sha256 differs", func(_ int, w http.ResponseWriter, _ []byte) { answerStored(w, 201, []byte("other")) }, "but 16 bytes sha256:"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newPushEnv(t, tc.answer)
			_, err := e.run(t, "result", e.file)
			if exitCode(err) != ExitRefused || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v (exit %d), want exit %d containing %q", err, exitCode(err), ExitRefused, tc.want)
			}
			if n := len(e.box.all()); n != 1 {
				t.Errorf("%d tries, want 1 (no retry of a refusal)", n)
			}
		})
	}
}

// 503 with Retry-After: the next try waits that long and carries the token
// the file holds by then.
func TestPushRetriesHonouringRetryAfterAndRereadsToken(t *testing.T) {
	var e *pushEnv
	e = newPushEnv(t, func(n int, w http.ResponseWriter, body []byte) {
		switch n {
		case 1:
			_ = os.WriteFile(e.tokenFile, []byte("token-2"), 0o600) // the kubelet rotated it
			refuse(503, "spoke unreachable", "Retry-After", "1")(n, w, body)
		case 2:
			refuse(429, "slow down", "Retry-After", time.Now().Add(2*time.Second).UTC().Format(http.TimeFormat))(n, w, body)
		default:
			answerStored(w, 201, body)
		}
	})
	if _, err := e.run(t, "result", e.file); err != nil {
		t.Fatal(err)
	}
	tries := e.box.all()
	if len(tries) != 3 {
		t.Fatalf("%d tries, want 3", len(tries))
	}
	if tries[0].token != "token-1" || tries[1].token != "token-2" {
		t.Errorf("tokens %q, %q: want the file re-read before the second try", tries[0].token, tries[1].token)
	}
	if gap := tries[1].at.Sub(tries[0].at); gap < 900*time.Millisecond {
		t.Errorf("second try %s after a 503 with Retry-After: 1", gap)
	}
	for i, tr := range tries {
		if !bytes.Equal(tr.body, e.content) {
			t.Errorf("try %d sent %q, want the whole file again", i+1, tr.body)
		}
	}
}

// 507 is the drop-box's free-space floor, answered with Retry-After: the
// volume empties again, so push waits and tries again instead of failing
// the pod.
func TestPushRetriesInsufficientStorage(t *testing.T) {
	e := newPushEnv(t, func(n int, w http.ResponseWriter, body []byte) {
		if n == 1 {
			refuse(http.StatusInsufficientStorage, "insufficient storage for artifacts, retry later", "Retry-After", "1")(n, w, body)
			return
		}
		answerStored(w, 201, body)
	})
	if _, err := e.run(t, "result", e.file); err != nil {
		t.Fatalf("push after a 507: %v (exit %d), want stored on the second try", err, exitCode(err))
	}
	tries := e.box.all()
	if len(tries) != 2 {
		t.Fatalf("%d tries, want 2", len(tries))
	}
	if gap := tries[1].at.Sub(tries[0].at); gap < 900*time.Millisecond {
		t.Errorf("second try %s after a 507 with Retry-After: 1", gap)
	}
}

func TestPushRetriesConnectionErrors(t *testing.T) {
	e := newPushEnv(t, func(n int, w http.ResponseWriter, body []byte) {
		if n == 1 {
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close() // connection reset mid-request
			return
		}
		answerStored(w, 201, body)
	})
	if _, err := e.run(t, "result", e.file); err != nil {
		t.Fatal(err)
	}
	if n := len(e.box.all()); n != 2 {
		t.Errorf("%d tries, want 2", n)
	}
}

// A drop-box whose certificate push does not trust: no retrying until
// --timeout, exit 2 at once saying how to trust it; with --ca-file it works.
func TestPushUntrustedCertificateFailsAtOnce(t *testing.T) {
	e := newPushEnv(t, stored(http.StatusCreated))
	e.srv.Close()
	e.srv = httptest.NewTLSServer(e.box)
	t.Cleanup(e.srv.Close)
	_, err := e.run(t, "result", e.file)
	if exitCode(err) != ExitUsage || !strings.Contains(err.Error(), "certificate is not trusted") {
		t.Fatalf("untrusted drop-box: exit %d %v, want %d saying the certificate is not trusted", exitCode(err), err, ExitUsage)
	}
	if n := len(e.box.all()); n != 0 {
		t.Errorf("%d requests reached the drop-box through an untrusted connection", n)
	}
	ca := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: e.srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := e.run(t, "--ca-file", ca, "result", e.file); err != nil || !strings.HasPrefix(out, "stored turn-1/result: ") {
		t.Errorf("with --ca-file: %q %v, want stored", out, err)
	}
}

func TestPushTimesOut(t *testing.T) {
	e := newPushEnv(t, refuse(503, "spoke unreachable", "Retry-After", "0"))
	_, err := e.run(t, "--timeout", "1500ms", "result", e.file)
	if exitCode(err) != ExitTimeout {
		t.Errorf("err %v exit %d, want exit %d", err, exitCode(err), ExitTimeout)
	}
	if n := len(e.box.all()); n < 2 {
		t.Errorf("%d tries within the timeout, want several", n)
	}
}

// Standard input is spooled once and sent whole on every try.
func TestPushSpoolsStdin(t *testing.T) {
	e := newPushEnv(t, func(n int, w http.ResponseWriter, body []byte) {
		if n == 1 {
			refuse(503, "x", "Retry-After", "0")(n, w, body)
			return
		}
		answerStored(w, 201, body)
	})
	in := strings.Repeat("streamed line\n", 10000)
	var out bytes.Buffer
	o := pushOptions{url: e.srv.URL, pod: "turn-1", tokenFile: e.tokenFile, timeout: 20 * time.Second}
	if err := runPush(t.Context(), o, "report", "-", strings.NewReader(in), &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	tries := e.box.all()
	if len(tries) != 2 || string(tries[0].body) != in || string(tries[1].body) != in {
		t.Fatalf("%d tries; bodies not the whole input each time", len(tries))
	}
	sum := sha256.Sum256([]byte(in))
	if !strings.Contains(out.String(), fmt.Sprintf("%d bytes sha256:%x", len(in), sum)) {
		t.Errorf("output %q", out.String())
	}
	left, _ := filepath.Glob(filepath.Join(os.TempDir(), "crucible-push-*"))
	for _, f := range left {
		if st, err := os.Stat(f); err == nil && time.Since(st.ModTime()) < time.Minute {
			t.Errorf("spool file %s left behind", f)
		}
	}
}

func TestPushUsage(t *testing.T) {
	e := newPushEnv(t, stored(201))
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"bad kind", []string{"push", "--url", e.srv.URL, "--pod", "turn-1", "--token-file", e.tokenFile, "../x", e.file}, "KIND"},
		{"uppercase kind", []string{"push", "--url", e.srv.URL, "--pod", "turn-1", "--token-file", e.tokenFile, "Result", e.file}, "KIND"},
		{"no url", []string{"push", "--url", "", "--pod", "turn-1", "--token-file", e.tokenFile, "result", e.file}, "no drop-box URL"},
		{"url not http", []string{"push", "--url", "file:///etc", "--pod", "turn-1", "--token-file", e.tokenFile, "result", e.file}, "want an http(s) URL"},
		{"no pod", []string{"push", "--url", e.srv.URL, "--pod", "", "--token-file", e.tokenFile, "result", e.file}, "no work pod id"},
		{"pod with a slash", []string{"push", "--url", e.srv.URL, "--pod", "a/b", "--token-file", e.tokenFile, "result", e.file}, "--pod"},
		{"missing file", []string{"push", "--url", e.srv.URL, "--pod", "turn-1", "--token-file", e.tokenFile, "result", "/nonexistent"}, "no such file"},
		{"directory", []string{"push", "--url", e.srv.URL, "--pod", "turn-1", "--token-file", e.tokenFile, "result", t.TempDir()}, "not a regular file"},
		{"missing token file", []string{"push", "--url", e.srv.URL, "--pod", "turn-1", "--token-file", "/nonexistent", "result", e.file}, "read token file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := Run(t.Context(), tc.args, io.Discard, io.Discard)
			if exitCode(err) != ExitUsage || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v exit %d, want exit %d containing %q", err, exitCode(err), ExitUsage, tc.want)
			}
		})
	}
	if n := len(e.box.all()); n != 0 {
		t.Errorf("%d requests sent for bad usage", n)
	}
	empty := filepath.Join(t.TempDir(), "empty")
	_ = os.WriteFile(empty, []byte("\n"), 0o600)
	err := Run(context.Background(), []string{"push", "--url", e.srv.URL, "--pod", "turn-1", "--token-file", empty, "result", e.file}, io.Discard, io.Discard)
	if exitCode(err) != ExitUsage {
		t.Errorf("empty token file: %v", err)
	}
}

func TestRetryAfter(t *testing.T) {
	cases := map[string]time.Duration{
		"": 0, "0": 0, "3": 3 * time.Second, "-5": 0, "abc": 0, "99999999999": maxRetryAfter, "1e3": 0,
		time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat): 0, time.Now().Add(time.Hour).UTC().Format(http.TimeFormat): maxRetryAfter,
	}
	for in, want := range cases {
		if got := retryAfter(in); got != want {
			t.Errorf("%q: %s, want %s", in, got, want)
		}
	}
}

func TestCopySelf(t *testing.T) {
	dir := t.TempDir()
	if err := Run(t.Context(), []string{"copy-self", dir}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	self, _ := os.Executable()
	want, _ := os.ReadFile(self)
	got, err := os.ReadFile(filepath.Join(dir, "crucible"))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("copied binary differs from %s (%v)", self, err)
	}
	if st, _ := os.Stat(filepath.Join(dir, "crucible")); st.Mode().Perm() != 0o755 {
		t.Errorf("mode %v, want 0755", st.Mode().Perm())
	}
	if err := Run(t.Context(), []string{"copy-self", "/nonexistent/dir"}, io.Discard, io.Discard); err == nil {
		t.Error("copy into a missing directory succeeded")
	}
}

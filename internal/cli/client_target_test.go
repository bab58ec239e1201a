package cli

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// destination records where the client commands connected and what
// arrived there.
type destination struct {
	mu    sync.Mutex
	dials []string // host:port the client dialled, whatever it resolves to
	auths []string // the Authorization header of every request that arrived
}

func (d *destination) dialled() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.dials...)
}

func (d *destination) authorizations() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.auths...)
}

// routeAllDials makes every connection of the client commands (their
// transport is built on http.DefaultTransport) go to one local server
// answering an empty list, whatever host the URL names, and records the
// address dialled. So a test sees where the CLI would have connected without
// any name being resolved or any other host reached. Only GET /api/pods is
// answered (an empty list); anything else is a 404.
func routeAllDials(t *testing.T) *destination {
	t.Helper()
	d := &destination{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		d.auths = append(d.auths, r.Header.Get("Authorization"))
		d.mu.Unlock()
		if r.URL.Path != "/api/pods" {
			http.NotFound(w, r) // ends every other command, however it would retry
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte("[]"))
	}))
	t.Cleanup(srv.Close)
	orig := http.DefaultTransport
	tr := &http.Transport{DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
		d.mu.Lock()
		d.dials = append(d.dials, addr)
		d.mu.Unlock()
		var dialer net.Dialer
		return dialer.DialContext(ctx, "tcp", srv.Listener.Addr().String())
	}}
	http.DefaultTransport = tr
	t.Cleanup(func() {
		http.DefaultTransport = orig
		tr.CloseIdleConnections()
	})
	return d
}

// writeDevEnv writes a dev stack's env file naming api as its controller.
func writeDevEnv(t *testing.T, dir, api string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	env := "# crucible dev stack: source this file.\nexport CRUCIBLE_API='" + api + "'\nexport HUB_SERVER='https://127.0.0.1:6443'\n"
	if err := os.WriteFile(filepath.Join(dir, "env"), []byte(env), 0o644); err != nil {
		t.Fatal(err)
	}
}

// noAmbientTarget clears what would name a controller or credentials
// besides the test's own flags.
func noAmbientTarget(t *testing.T) {
	t.Helper()
	t.Setenv("CRUCIBLE_API", "")
	t.Setenv("KUBECONFIG", "")
}

// A .dev/env in the working directory (a cloned repository may ship one) is
// not where the client commands send the user's token: without --dev they
// go to $CRUCIBLE_API or the default address; with --dev they read it.
func TestDevEnvOnlyWithDev(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		cwdEnv string // CRUCIBLE_API of ./.dev/env
		dirEnv string // CRUCIBLE_API of DIR/env, for --dev=DIR
		apiEnv string // $CRUCIBLE_API
		want   string // the address dialled
	}{
		{"a ./.dev/env is ignored", []string{"pods", "list"}, "http://elsewhere.example.invalid:8080", "", "", "127.0.0.1:8080"},
		{"a ./.dev/env is ignored for $CRUCIBLE_API", []string{"pods", "list"}, "http://elsewhere.example.invalid:8080", "", "http://127.0.0.2:9090", "127.0.0.2:9090"},
		{"--dev reads ./.dev/env", []string{"pods", "list", "--dev"}, "http://127.0.0.1:18080", "", "", "127.0.0.1:18080"},
		{"--dev=DIR reads DIR/env", []string{"pods", "list", "--dev=stack"}, "http://127.0.0.1:18080", "http://127.0.0.1:28080", "", "127.0.0.1:28080"},
		{"--dev wins over $CRUCIBLE_API", []string{"pods", "list", "--dev"}, "http://127.0.0.1:18080", "", "http://127.0.0.2:9090", "127.0.0.1:18080"},
		{"--server wins over everything", []string{"pods", "list", "--server", "http://127.0.0.3:7070"}, "http://127.0.0.1:18080", "", "http://127.0.0.2:9090", "127.0.0.3:7070"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			noAmbientTarget(t)
			t.Setenv("CRUCIBLE_API", tc.apiEnv)
			cwd := t.TempDir()
			writeDevEnv(t, filepath.Join(cwd, ".dev"), tc.cwdEnv)
			if tc.dirEnv != "" {
				writeDevEnv(t, filepath.Join(cwd, "stack"), tc.dirEnv)
			}
			t.Chdir(cwd)
			d := routeAllDials(t)
			args := append(append([]string{}, tc.args...), "--token", "hub-secret")
			if err := Run(t.Context(), args, io.Discard, io.Discard); err != nil {
				t.Fatalf("crucible %s: %v", strings.Join(args, " "), err)
			}
			if diff := cmp.Diff([]string{tc.want}, d.dialled()); diff != "" {
				t.Errorf("dialled (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{"Bearer hub-secret"}, d.authorizations()); diff != "" {
				t.Errorf("Authorization (-want +got):\n%s", diff)
			}
		})
	}
}

// --dev names a directory without a stack, or a stack without a
// controller: an error naming it, and nothing sent.
func TestDevWithoutStack(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     string // DIR/env's content, "" for none
		wantErr string
	}{
		{"no env file", []string{"pods", "list", "--dev=nostack"}, "",
			"--dev nostack: open nostack/env: no such file or directory (start a stack there with: crucible dev up --dir nostack)"},
		{"a stack without the federation", []string{"pods", "list", "--dev=nostack"}, "export HUB_SERVER='https://127.0.0.1:6443'\n",
			"--dev nostack: nostack/env has no CRUCIBLE_API: the stack runs without a controller (dev up --no-federation)"},
		{"--server and --dev", []string{"pods", "list", "--dev", "--server", "http://127.0.0.1:7070"}, "",
			"--server and --dev both name the controller: give one"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			noAmbientTarget(t)
			cwd := t.TempDir()
			if tc.env != "" {
				if err := os.MkdirAll(filepath.Join(cwd, "nostack"), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(cwd, "nostack", "env"), []byte(tc.env), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			t.Chdir(cwd)
			d := routeAllDials(t)
			err := Run(t.Context(), tc.args, io.Discard, io.Discard)
			if err == nil || err.Error() != tc.wantErr {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
			if got := d.dialled(); len(got) != 0 {
				t.Errorf("dialled %v, want nothing", got)
			}
		})
	}
}

// Credentials go only over https or to a loopback host: plain http to any
// other host is refused before anything is dialled, whichever way the
// credentials came (flag, kubeconfig token, exec plugin, which must not
// even run) and whichever way the server was named; without credentials,
// or with the override, the request goes out.
func TestCredentialsOnlyOverHTTPSOrLoopback(t *testing.T) {
	dir := t.TempDir()
	ran := filepath.Join(dir, "plugin-ran")
	plugin := filepath.Join(dir, "plugin.sh")
	if err := os.WriteFile(plugin, []byte("#!/bin/sh\ntouch "+ran+"\n"+
		`printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"from-exec"}}'`+"\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	execUser := "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: " + plugin + "\n      interactiveMode: Never"
	const refused = `refusing to send credentials over plain http to crucible.example.invalid:8080, which is not a loopback host: use https, or --insecure-send-credentials-over-http to override`
	tests := []struct {
		name       string
		args       []string
		kubeconfig string // $KUBECONFIG's user, "" for none
		apiEnv     string
		wantErr    string
		wantAuth   string // the Authorization that arrived, when sent
	}{
		{"--token", []string{"pods", "list", "--server", "http://crucible.example.invalid:8080", "--token", "hub-secret"}, "", "",
			`--server "http://crucible.example.invalid:8080": ` + refused, ""},
		{"logs -f --token", []string{"logs", "-f", "turn-1", "--server", "http://crucible.example.invalid:8080", "--token", "hub-secret"}, "", "",
			`--server "http://crucible.example.invalid:8080": ` + refused, ""},
		{"submit --token", []string{"submit", "--image", "x", "--server", "http://crucible.example.invalid:8080", "--token", "hub-secret", "--", "true"}, "", "",
			`--server "http://crucible.example.invalid:8080": ` + refused, ""},
		{"kubeconfig token", []string{"pods", "list", "--server", "http://crucible.example.invalid:8080"}, "    token: static-token", "",
			`--server "http://crucible.example.invalid:8080": ` + refused, ""},
		{"kubeconfig exec plugin", []string{"pods", "list", "--server", "http://crucible.example.invalid:8080"}, execUser, "",
			`--server "http://crucible.example.invalid:8080": ` + refused, ""},
		{"$CRUCIBLE_API", []string{"pods", "list", "--token", "hub-secret"}, "", "http://crucible.example.invalid:8080",
			`$CRUCIBLE_API "http://crucible.example.invalid:8080": ` + refused, ""},
		{"not a URL", []string{"pods", "list", "--server", "crucible.example.invalid:8080"}, "", "",
			`--server "crucible.example.invalid:8080": want an http:// or https:// URL`, ""},
		{"the override", []string{"pods", "list", "--server", "http://crucible.example.invalid:8080", "--token", "hub-secret", "--insecure-send-credentials-over-http"}, "", "",
			"", "Bearer hub-secret"},
		{"no credentials", []string{"pods", "list", "--server", "http://crucible.example.invalid:8080"}, "", "", "", ""},
		{"localhost", []string{"pods", "list", "--server", "http://localhost:8080", "--token", "hub-secret"}, "", "", "", "Bearer hub-secret"},
		{"::1", []string{"pods", "list", "--server", "http://[::1]:8080", "--token", "hub-secret"}, "", "", "", "Bearer hub-secret"},
		{"127.0.0.0/8", []string{"pods", "list", "--server", "http://127.9.8.7:8080", "--token", "hub-secret"}, "", "", "", "Bearer hub-secret"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			noAmbientTarget(t)
			t.Setenv("CRUCIBLE_API", tc.apiEnv)
			if tc.kubeconfig != "" {
				t.Setenv("KUBECONFIG", kubeconfig(t, t.TempDir(), tc.kubeconfig))
			}
			t.Chdir(t.TempDir())
			d := routeAllDials(t)
			err := Run(t.Context(), tc.args, io.Discard, io.Discard)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				if got := d.dialled(); len(got) != 0 {
					t.Errorf("dialled %v, want nothing", got)
				}
				if _, err := os.Stat(ran); !os.IsNotExist(err) {
					t.Errorf("the exec plugin ran (%v): it must not be asked for a credential that will not be sent", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{tc.wantAuth}, d.authorizations()); diff != "" {
				t.Errorf("Authorization (-want +got):\n%s", diff)
			}
		})
	}
}

// https carries credentials to any host.
func TestCredentialsOverHTTPS(t *testing.T) {
	noAmbientTarget(t)
	var got []string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Get("Authorization"))
		_, _ = w.Write([]byte("[]"))
	}))
	defer srv.Close()
	orig := http.DefaultTransport
	tr := srv.Client().Transport.(*http.Transport).Clone()
	tr.TLSClientConfig.ServerName = "example.com" // in httptest's certificate
	tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dialer net.Dialer
		return dialer.DialContext(ctx, "tcp", srv.Listener.Addr().String())
	}
	http.DefaultTransport = tr
	defer func() { http.DefaultTransport = orig; tr.CloseIdleConnections() }()
	if err := Run(t.Context(), []string{"pods", "list", "--server", "https://crucible.example.invalid:8443", "--token", "hub-secret"}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"Bearer hub-secret"}, got); diff != "" {
		t.Errorf("Authorization (-want +got):\n%s", diff)
	}
}

// A controller (or whatever answers at --server) that redirects does not
// get the client to carry the token elsewhere: nothing reaches the target,
// and the error names it.
func TestRedirectNotFollowed(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		code  int
		serve string // a path the first server answers instead of redirecting
		path  string // the redirected request's path
		tail  []string
	}{
		{"pods list 307", []string{"pods", "list"}, http.StatusTemporaryRedirect, "", "/api/pods", nil},
		{"pods list 302", []string{"pods", "list"}, http.StatusFound, "", "/api/pods", nil},
		{"pods get 308", []string{"pods", "get", "turn-1"}, http.StatusPermanentRedirect, "", "/api/pods/turn-1", nil},
		{"logs", []string{"logs", "turn-1"}, http.StatusTemporaryRedirect, "", "/api/pods/turn-1/artifacts/log", nil},
		{"logs -f", []string{"logs", "-f", "turn-1"}, http.StatusTemporaryRedirect, "", "/api/pods/turn-1/logs", nil},
		{"submit", []string{"submit", "--image", "x"}, http.StatusTemporaryRedirect, "", "/api/pods", []string{"--", "true"}},
		{"pods list -w", []string{"pods", "list", "-w"}, http.StatusTemporaryRedirect, "/api/pods", "/api/events", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			noAmbientTarget(t)
			var reached []string
			elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				reached = append(reached, r.Method+" "+r.URL.Path+" Authorization="+r.Header.Get("Authorization"))
				http.NotFound(w, r) // ends every command, however it would retry
			}))
			defer elsewhere.Close()
			first := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == tc.serve {
					_, _ = w.Write([]byte("[]"))
					return
				}
				http.Redirect(w, r, elsewhere.URL+r.URL.Path, tc.code)
			}))
			defer first.Close()
			args := append(append(append([]string{}, tc.args...), "--server", first.URL, "--token", "hub-secret"), tc.tail...)
			err := Run(t.Context(), args, io.Discard, io.Discard)
			want := "controller API at " + first.URL + " answered " + fmt.Sprintf("%d %s", tc.code, http.StatusText(tc.code)) + " redirecting to " + elsewhere.URL + tc.path +
				": not followed: crucible sends requests, and your credentials, only to the server you named; if that is the controller, give it as --server"
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("err = %v, want it to contain %q", err, want)
			}
			if len(reached) != 0 {
				t.Errorf("the redirect's target got %q, want nothing", reached)
			}
		})
	}
}

// Which servers may get credentials is decided from the URL alone: a name
// is not resolved to find out whether it is loopback.
func TestCheckTarget(t *testing.T) {
	const override = ", which is not a loopback host: use https, or --insecure-send-credentials-over-http to override"
	tests := []struct {
		server  string
		sends   bool
		over    bool
		wantErr string
	}{
		{"https://crucible.example.com", true, false, ""},
		{"https://10.0.0.1:8443/prefix", true, false, ""},
		{"http://127.0.0.1:8080", true, false, ""},
		{"http://127.255.0.1", true, false, ""},
		{"http://[::1]:8080", true, false, ""},
		{"http://[::ffff:127.0.0.1]:8080", true, false, ""},
		{"http://localhost:8080", true, false, ""},
		{"http://LocalHost", true, false, ""},
		{"http://crucible.example.com:8080", false, false, ""},
		{"http://crucible.example.com:8080", true, true, ""},
		{"http://crucible.example.com:8080", true, false, `--server "http://crucible.example.com:8080": refusing to send credentials over plain http to crucible.example.com:8080` + override},
		{"http://127.0.0.1.example.com", true, false, `--server "http://127.0.0.1.example.com": refusing to send credentials over plain http to 127.0.0.1.example.com` + override},
		{"http://localhost.example.com", true, false, `--server "http://localhost.example.com": refusing to send credentials over plain http to localhost.example.com` + override},
		{"http://0.0.0.0:8080", true, false, `--server "http://0.0.0.0:8080": refusing to send credentials over plain http to 0.0.0.0:8080` + override},
		{"http://10.0.0.1", true, false, `--server "http://10.0.0.1": refusing to send credentials over plain http to 10.0.0.1` + override},
		{"ftp://127.0.0.1", false, false, `--server "ftp://127.0.0.1": want an http:// or https:// URL`},
		{"http://", false, false, `--server "http://": want an http:// or https:// URL`},
		{"http://%zz", false, false, `--server "http://%zz": want an http:// or https:// URL`},
	}
	for _, tc := range tests {
		err := checkTarget(tc.server, "--server", tc.sends, tc.over)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tc.wantErr {
			t.Errorf("checkTarget(%q, sends=%v, override=%v) = %q, want %q", tc.server, tc.sends, tc.over, got, tc.wantErr)
		}
	}
}

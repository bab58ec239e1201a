package cli

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/profile"
)

// fallbackServer is the controller's default internal listener, for a
// client with no other address.
const fallbackServer = "http://" + profile.DefaultInternalListen

// devDir is --dev of the client commands: the dev stack whose env file names
// the controller. Like the credentials, one value for the one command a
// process runs. A .dev/env is never read without it: a cloned repository may
// ship one naming any server, and the user's hub token would go there.
var devDir string

// resolveServer picks the controller's address and names where it came
// from, for errors: --server, else --dev's env file, else $CRUCIBLE_API,
// else the default. A flag wins over the environment because the user gave
// it for this command; --server and --dev together are a contradiction.
func resolveServer(flag, env, dev string) (server, source string, err error) {
	switch {
	case flag != "" && dev != "":
		return "", "", errors.New("--server and --dev both name the controller: give one")
	case flag != "":
		return flag, "--server", nil
	case dev != "":
		return readDevServer(dev)
	case env != "":
		return env, "$CRUCIBLE_API", nil
	}
	return fallbackServer, "the default", nil
}

// readDevServer reads CRUCIBLE_API from the env file `crucible dev up`
// wrote into dir (devstack.Stack.Env: `export K='V'` lines).
func readDevServer(dir string) (server, source string, err error) {
	file := filepath.Join(dir, devstack.EnvFile)
	data, err := os.ReadFile(file)
	if err != nil {
		return "", "", fmt.Errorf("--dev %s: %w (start a stack there with: crucible dev up --dir %s)", dir, err, dir)
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "export CRUCIBLE_API="); ok {
			return strings.Trim(v, "'"), "CRUCIBLE_API in " + file, nil
		}
	}
	return "", "", fmt.Errorf("--dev %s: %s has no CRUCIBLE_API: the stack runs without a controller (dev up --no-federation)", dir, file)
}

// checkTarget refuses a server that is not an http(s) URL, and credentials
// over plain http to a host other than loopback, where anyone on the path
// could read the bearer token and use it against the hub. Without
// credentials nothing secret travels, so plain http is allowed anywhere.
func checkTarget(server, source string, sendsCredentials, overPlainHTTP bool) error {
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%s %q: want an http:// or https:// URL", source, server)
	}
	if u.Scheme == "https" || !sendsCredentials || overPlainHTTP || isLoopbackHost(u.Hostname()) {
		return nil
	}
	return fmt.Errorf("%s %q: refusing to send credentials over plain http to %s, which is not a loopback host: use https, or --%s to override",
		source, server, u.Host, insecureHTTPFlag)
}

// isLoopbackHost reports a host that never leaves the machine: localhost,
// 127.0.0.0/8 or ::1. Other names are not resolved to find out: what a name
// resolves to is whoever answers DNS.
func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// refuseRedirect keeps every redirect's answer as the answer: the
// credentials wrappers add the bearer token to every request they send, the
// redirected one too, so following would hand the token to whatever host
// the Location names.
func refuseRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// redirectError reports a redirect answer from server, or nil for any other.
func redirectError(server string, resp *http.Response) error {
	if resp.StatusCode/100 != 3 || resp.Header.Get("Location") == "" {
		return nil
	}
	to := resp.Header.Get("Location")
	if loc, err := resp.Location(); err == nil {
		to = loc.String()
	}
	return fmt.Errorf("controller API at %s answered %s redirecting to %s: not followed: crucible sends requests, and your credentials, only to the server you named; if that is the controller, give it as --server",
		server, resp.Status, to)
}

// refusingTransport fails every request with err: the API client's
// transport when its server or credentials were refused, so no path that
// forgets to check apiClient.err can send anything.
type refusingTransport struct{ err error }

func (t refusingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_ = r.Body.Close() // a RoundTripper closes the body, on errors too
	}
	return nil, t.err
}

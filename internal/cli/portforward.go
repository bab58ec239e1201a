package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/websocket"
	"github.com/spf13/cobra"

	"crucible.dev/crucible/internal/api/apiv1"
)

// Relay bounds on the client side.
const (
	// relayHandshake bounds opening one relay (the WebSocket to the API,
	// which opens the stream on the spoke before it answers).
	relayHandshake = time.Minute
	// relayBuffer is what one read of the local connection sends at most,
	// as one WebSocket message.
	relayBuffer = 32 << 10
	// relayCloseWait bounds waiting for the controller's close frame after
	// ours.
	relayCloseWait = 2 * time.Second
)

// portSpec is one [LOCAL:]REMOTE: Local 0 picks a free port.
type portSpec struct{ Local, Remote int }

// parsePortSpec reads kubectl's port syntax: REMOTE (the same port
// locally), LOCAL:REMOTE, :REMOTE or 0:REMOTE (a random local port).
func parsePortSpec(s string) (portSpec, error) {
	local, remote, pair := strings.Cut(s, ":")
	if !pair {
		local, remote = s, s
	}
	r, err := portNumber(remote, 1)
	if err != nil {
		return portSpec{}, fmt.Errorf("port %q: REMOTE %w", s, err)
	}
	if pair && local == "" {
		return portSpec{Remote: r}, nil
	}
	l, err := portNumber(local, 0)
	if err != nil {
		return portSpec{}, fmt.Errorf("port %q: LOCAL %w", s, err)
	}
	return portSpec{Local: l, Remote: r}, nil
}

// portNumber parses a decimal port from min to 65535.
func portNumber(s string, min int) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < min || n > 65535 || strconv.Itoa(n) != s {
		return 0, fmt.Errorf("must be a port number from %d to 65535, not %q", min, s)
	}
	return n, nil
}

// String is the spec as it parses back.
func (p portSpec) String() string { return strconv.Itoa(p.Local) + ":" + strconv.Itoa(p.Remote) }

// listenAddresses resolves --address: "localhost" is 127.0.0.1 and, when
// the machine has it, ::1 (as kubectl does); anything else must be an IP
// address.
func listenAddresses(flag []string) ([]listenAddr, error) {
	var out []listenAddr
	for _, a := range flag {
		a = strings.TrimSpace(a)
		switch {
		case a == "localhost":
			out = append(out, listenAddr{ip: "127.0.0.1"}, listenAddr{ip: "::1", optional: true})
		case net.ParseIP(a) != nil:
			out = append(out, listenAddr{ip: a})
		default:
			return nil, fmt.Errorf("--address %q: want localhost or an IP address", a)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("--address: give at least one address")
	}
	return out, nil
}

// listenAddr is one address to listen on; an optional one that cannot be
// had is skipped.
type listenAddr struct {
	ip       string
	optional bool
}

// relayDialer opens relays to the controller: the API client's server and
// credentials (the same bearer header, the same refusal to send them
// anywhere but over https or to loopback, no redirects).
type relayDialer struct {
	c      *apiClient
	header func() (http.Header, error)
	pod    string
}

func newRelayDialer(server, pod string) *relayDialer {
	// The flags' values as this command parsed them, copied: a relay opens
	// long after, and building another command tree in the process (a test
	// running the next command) registers the flags again, which resets the
	// package's values to their defaults.
	creds := credentials
	return &relayDialer{c: newAPIClient(server), header: creds.header, pod: pod}
}

// header is what the credentials add to a request (a bearer token, from a
// file or an exec plugin as it rotates): the WebSocket dialer takes
// headers, not a transport.
func (c apiCredentials) header() (http.Header, error) {
	var got http.Header
	rt, _, err := c.transport(captureTransport(func(r *http.Request) { got = r.Header.Clone() }))
	if err != nil {
		return nil, err
	}
	req, _ := http.NewRequest(http.MethodGet, "http://crucible.invalid/", nil) //nolint:noctx // never sent: the transport only captures its headers
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	_ = resp.Body.Close()
	return got, nil
}

type captureTransport func(*http.Request)

func (f captureTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	f(r)
	return &http.Response{StatusCode: http.StatusNoContent, Body: http.NoBody, Request: r}, nil
}

// runLive asks the controller whether pod can be forwarded to and how.
func (d *relayDialer) runLive(ctx context.Context) (apiv1.RunLive, error) {
	var info apiv1.RunLive
	err := d.c.do(ctx, http.MethodGet, "/api/pods/"+url.PathEscape(d.pod)+"/run-live", nil, &info)
	return info, err
}

// relayRefused is a handshake the controller refused for good (the pod
// is gone, run-live is off, the port or the caller not allowed): forwarding
// stops.
type relayRefused struct{ err error }

func (e *relayRefused) Error() string { return e.err.Error() }
func (e *relayRefused) Unwrap() error { return e.err }

// dial opens one relay to the pod's remote port.
func (d *relayDialer) dial(ctx context.Context, remote int) (*websocket.Conn, error) {
	if d.c.err != nil {
		return nil, &relayRefused{d.c.err}
	}
	u, err := url.Parse(d.c.server + "/api/pods/" + url.PathEscape(d.pod) + "/portforward?port=" + strconv.Itoa(remote))
	if err != nil {
		return nil, &relayRefused{err}
	}
	u.Scheme = map[string]string{"https": "wss", "http": "ws"}[u.Scheme]
	h, err := d.header()
	if err != nil {
		return nil, &relayRefused{err}
	}
	h.Set(apiv1.ClientHeader, "crucible-cli")
	dialer := websocket.Dialer{Proxy: http.ProxyFromEnvironment, HandshakeTimeout: relayHandshake,
		ReadBufferSize: relayBuffer, WriteBufferSize: relayBuffer}
	ws, resp, err := dialer.DialContext(ctx, u.String(), h)
	if err == nil {
		return ws, nil
	}
	if resp == nil {
		return nil, fmt.Errorf("controller API at %s: %w", d.c.server, err)
	}
	defer resp.Body.Close()
	return nil, handshakeError(d.c.server, resp)
}

// handshakeError is the controller's answer to a refused upgrade; a 4xx
// other than 429 is final.
func handshakeError(server string, resp *http.Response) error {
	if err := redirectError(server, resp); err != nil {
		return &relayRefused{err}
	}
	var msg string
	var e struct{ Error string }
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if jsonErr := json.Unmarshal(body, &e); jsonErr == nil && e.Error != "" {
		msg = fmt.Sprintf("%s (HTTP %d)", e.Error, resp.StatusCode)
	} else {
		msg = fmt.Sprintf("controller answered %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	if resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests {
		return &relayRefused{errors.New(msg)}
	}
	return errors.New(msg)
}

func newPortForwardCmd() *cobra.Command {
	var server string
	var addresses []string
	cmd := &cobra.Command{
		Use:   "port-forward POD [LOCAL:]REMOTE [...]",
		Short: "Forward local ports to a work pod's ports, through the controller (run-live)",
		Long: `port-forward listens on local ports and forwards each connection to a port of a
work pod, as kubectl port-forward does, through the controller: it opens a
WebSocket to the API (GET /api/pods/POD/portforward), which the controller
relays to the pod through its spoke's API server with the cluster's federated
identity. You need create on workpods/portforward for the pod's cluster, the
cluster must enable run_live, and REMOTE must be one of its run_live_ports.

REMOTE alone listens on the same port locally; LOCAL:REMOTE on LOCAL; :REMOTE
or 0:REMOTE on a random free port. It listens on localhost (127.0.0.1 and ::1)
unless --address says otherwise. Each accepted connection is one session.
Ctrl-C closes the listeners and every open session (exit 130).`,
		Example: `  crucible port-forward turn-abc123 7777
  crucible port-forward turn-abc123 8080:7777 :9000
  crucible port-forward --address 0.0.0.0 turn-abc123 7777`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			specs := make([]portSpec, 0, len(args)-1)
			for _, a := range args[1:] {
				p, err := parsePortSpec(a)
				if err != nil {
					return err
				}
				specs = append(specs, p)
			}
			return forwardPorts(cmd, newRelayDialer(server, args[0]), specs, addresses)
		},
	}
	addServerFlag(cmd, &server)
	cmd.Flags().StringSliceVar(&addresses, "address", []string{"localhost"}, "addresses to listen on, comma-separated (localhost or IP addresses)")
	return cmd
}

func newRunLiveCmd() *cobra.Command {
	var server string
	var addresses []string
	cmd := &cobra.Command{
		Use:   "run-live POD [LOCAL]",
		Short: "Forward a local port to the work pod's run-live port (its cluster's run_live_port)",
		Long: `run-live is port-forward to the pod's run-live port, the port its cluster's
run_live_port names (7777 unless the profile says otherwise), which the
controller tells. It listens on LOCAL, by default the same port number; 0 picks
a free one. Ctrl-C closes it (exit 130).`,
		Example: `  crucible run-live turn-abc123
  crucible run-live turn-abc123 0`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			d := newRelayDialer(server, args[0])
			info, err := d.runLive(cmd.Context())
			if err != nil {
				return err
			}
			if !info.Enabled || !info.Allowed {
				return fmt.Errorf("run-live to %s: %s", args[0], info.Reason)
			}
			spec := portSpec{Local: info.Port, Remote: info.Port}
			if len(args) == 2 {
				if spec.Local, err = portNumber(args[1], 0); err != nil {
					return fmt.Errorf("LOCAL %w", err)
				}
			}
			return forwardPorts(cmd, d, []portSpec{spec}, addresses)
		},
	}
	addServerFlag(cmd, &server)
	cmd.Flags().StringSliceVar(&addresses, "address", []string{"localhost"}, "addresses to listen on, comma-separated (localhost or IP addresses)")
	return cmd
}

// forwardPorts listens and relays until Ctrl-C (an ExitError with
// ExitInterrupted) or a refusal that makes going on pointless.
func forwardPorts(cmd *cobra.Command, d *relayDialer, specs []portSpec, addresses []string) error {
	addrs, err := listenAddresses(addresses)
	if err != nil {
		return err
	}
	f := &forwarder{dial: d.dial, pod: d.pod, out: cmd.OutOrStdout(), errOut: cmd.ErrOrStderr()}
	err = f.run(cmd.Context(), specs, addrs)
	if errors.Is(err, context.Canceled) {
		return &ExitError{Code: ExitInterrupted, Err: err}
	}
	return err
}

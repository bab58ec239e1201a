// Package portforward dials one TCP port of a pod through its cluster's API
// server (pods/portforward), the way `kubectl port-forward` does —
// WebSocket first, SPDY as the fallback — but without kubectl's local
// listener: each Dial is one session, one upgraded connection to the API
// server carrying one data and one error stream, which the caller bridges to
// wherever the bytes go (the API's WebSocket relay, R-RL1). The connection is
// made with the cluster's one rest.Config, so it carries the controller's
// federated identity and nothing else.
package portforward

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	streamhttp "k8s.io/streaming/pkg/httpstream"
)

// Bounds of a session's setup.
const (
	// dialTimeout is the handshake deadline without Target's own: the
	// upgrade of the connection to the API server and the opening of the
	// session's streams.
	dialTimeout = 30 * time.Second
	// maxErrorBytes bounds what is read of the error stream: the kubelet
	// writes one short message there.
	maxErrorBytes = 16 << 10
	// failureWait bounds waiting for the error stream's message once the
	// data stream ended.
	failureWait = 2 * time.Second
)

// ErrWriteTimeout is a write to the pod that did not finish within the
// session's write timeout; the session is closed.
var ErrWriteTimeout = errors.New("write to the pod's port timed out")

// Target says where a session goes: the pods/portforward URL of one pod on
// one cluster, and that cluster's client configuration.
type Target struct {
	// Config is the cluster's shared rest.Config (fleet.Client.Config): its
	// TLS settings and its token-injecting WrapTransport.
	Config *rest.Config
	// URL is the pod's portforward subresource (URL builds it).
	URL *url.URL
	// Port is the pod's port.
	Port int
	// WriteTimeout bounds one write to the pod; zero: none.
	WriteTimeout time.Duration
	// HandshakeTimeout bounds the whole setup, upgrade and streams; zero:
	// dialTimeout.
	HandshakeTimeout time.Duration
}

// URL is the portforward subresource of pod in namespace, as the cluster's
// REST client (its CoreV1 RESTClient) addresses it, path prefix included.
func URL(core rest.Interface, namespace, pod string) *url.URL {
	return core.Post().Resource("pods").Namespace(namespace).Name(pod).SubResource("portforward").URL()
}

// Session is one forwarded TCP connection to a pod's port.
type Session struct {
	conn         streamhttp.Connection
	raw          *dialConns // the network connections under conn
	data         streamhttp.Stream
	writeTimeout time.Duration
	writeTimer   *time.Timer // Write's deadline, armed while a write is under way
	failure      chan error  // the error stream's message (nil error: none), once
	closeOnce    sync.Once
}

// errHandshakeTimeout is the cause of a dial that ran past its handshake
// deadline (the caller's context ending is its own cause).
var errHandshakeTimeout = errors.New("port-forward: no connection within the handshake deadline")

// Dial opens a session: it upgrades a connection to the API server (a
// WebSocket tunnelling SPDY, or SPDY when the server cannot, exactly as
// kubectl chooses) and opens the stream pair of one forwarded connection,
// all within the handshake deadline. A dial that is abandoned — the
// deadline passed or ctx ended — closes the connections it made, so a
// spoke that accepts and never answers holds nothing of the controller's.
func Dial(ctx context.Context, t Target) (*Session, error) {
	timeout := t.HandshakeTimeout
	if timeout <= 0 {
		timeout = dialTimeout
	}
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("%w (%s)", errHandshakeTimeout, timeout))
	defer cancel()
	conns := &dialConns{}
	d, err := dialer(t, ctx, conns)
	if err != nil {
		return nil, err
	}
	conn, err := upgrade(ctx, d, conns)
	if err != nil {
		return nil, err
	}
	s, err := openStreams(ctx, conn, t, conns)
	if err != nil {
		_ = conn.Close()
		conns.abandon() // spdystream's Close waits for streams the spoke never answered
		return nil, err
	}
	return s, nil
}

// dialConns are the network connections one dial made (the WebSocket
// upgrade reports its connection to an httptrace.ClientTrace), so that an
// abandoned dial can close them: client-go's dialers take no context, and
// the goroutine blocked in one returns only when its connection fails.
type dialConns struct {
	mu     sync.Mutex
	conns  []net.Conn
	closed bool
}

// add records c, or closes it when the dial was abandoned already.
func (d *dialConns) add(c net.Conn) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		_ = c.Close()
		return
	}
	d.conns = append(d.conns, c)
}

// abandon closes every connection the dial made and any it makes later.
func (d *dialConns) abandon() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	for _, c := range d.conns {
		_ = c.Close()
	}
	d.conns = nil
}

// withDial sends each request of the dial with ctx — its handshake
// deadline, which the WebSocket upgrade sets on its connection — and a
// trace that hands the connection to conns.
type withDial struct {
	next  http.RoundTripper
	ctx   context.Context
	conns *dialConns
}

func (w withDial) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx := httptrace.WithClientTrace(w.ctx, &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) { w.conns.add(info.Conn) },
	})
	return w.next.RoundTrip(r.WithContext(ctx))
}

// dialer is kubectl's: the SPDY-over-WebSocket tunnel first, falling back to
// plain SPDY on an upgrade failure or an https proxy that cannot tunnel. The
// primary's failure is kept: when the fallback fails too, the API server's
// own answer to the first attempt (a 403 naming the missing RBAC) says more
// than the fallback's "unable to upgrade connection".
func dialer(t Target, ctx context.Context, conns *dialConns) (*fallback, error) {
	cfg := rest.CopyConfig(t.Config)
	wrap := cfg.WrapTransport // the token's
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		if wrap != nil {
			rt = wrap(rt)
		}
		return withDial{next: rt, ctx: ctx, conns: conns}
	}
	rt, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("spdy transport: %w", err)
	}
	// The token is in every request: a redirect is never followed.
	client := &http.Client{Transport: rt, CheckRedirect: func(*http.Request, []*http.Request) error {
		return errors.New("the API server answered with a redirect: not followed")
	}}
	spdyDialer := spdy.NewDialerForStreaming(upgrader, client, http.MethodPost, t.URL)
	tunnel, err := portforward.NewSPDYOverWebsocketDialerForStreaming(t.URL, cfg)
	if err != nil {
		return nil, fmt.Errorf("websocket transport: %w", err)
	}
	f := &fallback{}
	f.Dialer = portforward.NewFallbackDialerForStreaming(tunnel, spdyDialer, func(err error) bool {
		f.primary = err
		return streamhttp.IsUpgradeFailure(err) || streamhttp.IsHTTPSProxyError(err)
	})
	return f, nil
}

// fallback is the dialer and the primary's error, if it failed.
type fallback struct {
	streamhttp.Dialer
	primary error
}

// dialed is the outcome of one Dial.
type dialed struct {
	conn     streamhttp.Connection
	protocol string
	err      error
}

// upgrade dials within ctx (its handshake deadline); a dial abandoned
// closes its connections, and one that arrives after the caller gave up is
// closed.
func upgrade(ctx context.Context, d *fallback, conns *dialConns) (streamhttp.Connection, error) {
	done := make(chan dialed, 1)
	go func() {
		conn, protocol, err := d.Dial(portforward.PortForwardProtocolV1Name)
		done <- dialed{conn, protocol, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, dialError(r.err, d.primary)
		}
		if r.protocol != portforward.PortForwardProtocolV1Name {
			_ = r.conn.Close()
			return nil, fmt.Errorf("port-forward: the API server chose protocol %q, not %q", r.protocol, portforward.PortForwardProtocolV1Name)
		}
		return r.conn, nil
	case <-ctx.Done():
		conns.abandon()
		go closeLate(done)
		if cause := context.Cause(ctx); errors.Is(cause, errHandshakeTimeout) {
			return nil, fmt.Errorf("%w: %w", cause, context.DeadlineExceeded)
		}
		return nil, fmt.Errorf("port-forward: %w", ctx.Err())
	}
}

func closeLate(done <-chan dialed) {
	if r := <-done; r.conn != nil {
		_ = r.conn.Close()
	}
}

// dialError prefers the API server's status from the first attempt when
// the fallback's error carries none. The result wraps that status
// (apierrors.APIStatus), so callers can tell a refusal from an outage.
func dialError(final, primary error) error {
	if st := statusOf(final); st != nil {
		return fmt.Errorf("port-forward: %w", st)
	}
	if st := statusOf(primary); st != nil {
		return fmt.Errorf("port-forward: %w (the SPDY fallback: %w)", st, final)
	}
	return fmt.Errorf("port-forward: %w", final)
}

// statusOf finds the API server's status in err, also inside an upgrade
// failure (which does not unwrap).
func statusOf(err error) error {
	var uf *streamhttp.UpgradeFailureError
	if errors.As(err, &uf) {
		err = uf.Cause
	}
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		return err
	}
	return nil
}

// openStreams opens the error stream (read-only for the caller, as kubectl
// uses it), then the data stream, of one forwarded connection, or gives up
// when ctx ends, closing the connection. Stream creation waits for the
// server's reply, and nothing but the reply or client-go's own 30 seconds
// ends that wait: a spoke that never replies leaves the goroutine waiting
// that long, its connection closed already.
func openStreams(ctx context.Context, conn streamhttp.Connection, t Target, conns *dialConns) (*Session, error) {
	type opened struct {
		s   *Session
		err error
	}
	done := make(chan opened, 1)
	go func() {
		s, err := createStreams(conn, t, conns)
		done <- opened{s, err}
	}()
	select {
	case o := <-done:
		return o.s, o.err
	case <-ctx.Done():
		_ = conn.Close()
		conns.abandon()
		go func() { // a session that still arrives is closed
			if o := <-done; o.s != nil {
				_ = o.s.Close()
			}
		}()
		return nil, fmt.Errorf("port-forward: open streams: %w", context.Cause(ctx))
	}
}

// createStreams opens the session's error and data streams on conn.
func createStreams(conn streamhttp.Connection, t Target, conns *dialConns) (*Session, error) {
	h := http.Header{}
	h.Set(corev1.StreamType, corev1.StreamTypeError)
	h.Set(corev1.PortHeader, strconv.Itoa(t.Port))
	h.Set(corev1.PortForwardRequestIDHeader, "0")
	errStream, err := conn.CreateStream(h)
	if err != nil {
		return nil, fmt.Errorf("port-forward: error stream: %w", err)
	}
	_ = errStream.Close() // nothing is written to it
	s := &Session{conn: conn, raw: conns, writeTimeout: t.WriteTimeout, failure: make(chan error, 1)}
	go s.readFailure(errStream)
	h.Set(corev1.StreamType, corev1.StreamTypeData)
	if s.data, err = conn.CreateStream(h); err != nil {
		return nil, fmt.Errorf("port-forward: data stream: %w", err)
	}
	return s, nil
}

func (s *Session) readFailure(errStream io.Reader) {
	msg, err := io.ReadAll(io.LimitReader(errStream, maxErrorBytes))
	switch {
	case len(msg) > 0:
		s.failure <- fmt.Errorf("%w: %s", ErrPort, msg)
	case err != nil:
		s.failure <- fmt.Errorf("port-forward: error stream: %w", err)
	default:
		s.failure <- nil
	}
}

// ErrPort wraps what the node reported on the error stream: the pod's port
// could not be reached (nothing listens, the pod is gone).
var ErrPort = errors.New("the node could not forward the port")

// Read reads what the pod sent.
func (s *Session) Read(p []byte) (int, error) { return s.data.Read(p) }

// Write sends p to the pod. A write that takes longer than the write
// timeout closes the session and fails with ErrWriteTimeout: the stream
// has no deadlines of its own.
//
// Writes come one at a time (the relay's one copy to the pod), so one
// timer serves them all: a timer a write was crucible's own largest
// allocation per relayed message.
func (s *Session) Write(p []byte) (int, error) {
	if s.writeTimeout <= 0 {
		return s.data.Write(p)
	}
	if s.writeTimer == nil {
		s.writeTimer = time.AfterFunc(s.writeTimeout, func() { _ = s.Close() })
	} else {
		s.writeTimer.Reset(s.writeTimeout)
	}
	n, err := s.data.Write(p)
	if !s.writeTimer.Stop() { // it fired: the session is closed
		return n, ErrWriteTimeout
	}
	return n, err
}

// CloseWrite tells the pod nothing more will be sent (a TCP half-close).
func (s *Session) CloseWrite() error { return s.data.Close() }

// Ended is closed when the connection to the API server is gone (the API
// server restarted, the network broke, Close was called).
func (s *Session) Ended() <-chan bool { return s.conn.CloseChan() }

// Failure waits (briefly) for the error stream's message once the data
// stream ended: an ErrPort the node reported, or nil when it reported
// nothing.
func (s *Session) Failure(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, failureWait)
	defer cancel()
	select {
	case err := <-s.failure:
		s.failure <- err // for the next caller
		return err
	case <-ctx.Done():
		return nil
	}
}

// Close ends the session: the data stream is reset (unsent data dropped)
// and the connection to the API server closed.
func (s *Session) Close() error {
	s.closeOnce.Do(func() {
		if s.data != nil {
			_ = s.data.Reset()
		}
		_ = s.conn.Close()
		s.raw.abandon() // no fd outlives the session, whatever the spoke still owes
	})
	return nil
}

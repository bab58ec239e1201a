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
	"net/http"
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
	// dialTimeout bounds the upgrade of the connection to the API server
	// (client-go's dialers take no context).
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
}

// URL is the portforward subresource of pod in namespace, as the cluster's
// REST client (its CoreV1 RESTClient) addresses it, path prefix included.
func URL(core rest.Interface, namespace, pod string) *url.URL {
	return core.Post().Resource("pods").Namespace(namespace).Name(pod).SubResource("portforward").URL()
}

// Session is one forwarded TCP connection to a pod's port.
type Session struct {
	conn         streamhttp.Connection
	data         streamhttp.Stream
	writeTimeout time.Duration
	failure      chan error // the error stream's message (nil error: none), once
	closeOnce    sync.Once
}

// Dial opens a session: it upgrades a connection to the API server (a
// WebSocket tunnelling SPDY, or SPDY when the server cannot, exactly as
// kubectl chooses) and opens the stream pair of one forwarded connection.
func Dial(ctx context.Context, t Target) (*Session, error) {
	d, err := dialer(t)
	if err != nil {
		return nil, err
	}
	conn, err := upgrade(ctx, d)
	if err != nil {
		return nil, err
	}
	s, err := openStreams(ctx, conn, t)
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	return s, nil
}

// dialer is kubectl's: the SPDY-over-WebSocket tunnel first, falling back to
// plain SPDY on an upgrade failure or an https proxy that cannot tunnel. The
// primary's failure is kept: when the fallback fails too, the API server's
// own answer to the first attempt (a 403 naming the missing RBAC) says more
// than the fallback's "unable to upgrade connection".
func dialer(t Target) (*fallback, error) {
	rt, upgrader, err := spdy.RoundTripperFor(t.Config)
	if err != nil {
		return nil, fmt.Errorf("spdy transport: %w", err)
	}
	// The token is in every request: a redirect is never followed.
	client := &http.Client{Transport: rt, CheckRedirect: func(*http.Request, []*http.Request) error {
		return errors.New("the API server answered with a redirect: not followed")
	}}
	spdyDialer := spdy.NewDialerForStreaming(upgrader, client, http.MethodPost, t.URL)
	tunnel, err := portforward.NewSPDYOverWebsocketDialerForStreaming(t.URL, t.Config)
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

// upgrade dials within ctx and dialTimeout; a connection that arrives after
// the caller gave up is closed.
func upgrade(ctx context.Context, d *fallback) (streamhttp.Connection, error) {
	done := make(chan dialed, 1)
	go func() {
		conn, protocol, err := d.Dial(portforward.PortForwardProtocolV1Name)
		done <- dialed{conn, protocol, err}
	}()
	timer := time.NewTimer(dialTimeout)
	defer timer.Stop()
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
		go closeLate(done)
		return nil, fmt.Errorf("port-forward: %w", ctx.Err())
	case <-timer.C:
		go closeLate(done)
		return nil, fmt.Errorf("port-forward: no connection within %s: %w", dialTimeout, context.DeadlineExceeded)
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
// uses it), then the data stream, of one forwarded connection.
func openStreams(ctx context.Context, conn streamhttp.Connection, t Target) (*Session, error) {
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() }) // stream creation waits for the server's reply
	defer stop()
	h := http.Header{}
	h.Set(corev1.StreamType, corev1.StreamTypeError)
	h.Set(corev1.PortHeader, strconv.Itoa(t.Port))
	h.Set(corev1.PortForwardRequestIDHeader, "0")
	errStream, err := conn.CreateStream(h)
	if err != nil {
		return nil, fmt.Errorf("port-forward: error stream: %w", err)
	}
	_ = errStream.Close() // nothing is written to it
	s := &Session{conn: conn, writeTimeout: t.WriteTimeout, failure: make(chan error, 1)}
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
func (s *Session) Write(p []byte) (int, error) {
	if s.writeTimeout <= 0 {
		return s.data.Write(p)
	}
	t := time.AfterFunc(s.writeTimeout, func() { _ = s.Close() })
	n, err := s.data.Write(p)
	if !t.Stop() { // it fired: the session is closed
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
	})
	return nil
}

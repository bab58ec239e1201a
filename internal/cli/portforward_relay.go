package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// forwarder is port-forward's local side: listeners, and one relay (one
// WebSocket to the controller) per accepted connection.
type forwarder struct {
	dial        func(ctx context.Context, remote int) (*websocket.Conn, error)
	pod         string
	out, errOut io.Writer
	mu          sync.Mutex // one line at a time on out and errOut
}

// listener is one local listener and the pod port it forwards to.
type listener struct {
	ln     net.Listener
	local  int
	remote int
}

// errPortForwardStopped is the cause of a forwarder stopped by a session
// that ended for good (the pod ended, the permission is gone).
var errPortForwardStopped = errors.New("port-forward stopped")

// run listens on every address for every spec, prints `Forwarding from
// ADDR -> REMOTE` for each listener, and relays until ctx ends or a relay
// stops it; then it closes the listeners and every open relay and returns
// why it stopped (ctx's error after Ctrl-C).
func (f *forwarder) run(ctx context.Context, specs []portSpec, addrs []listenAddr) error {
	lns, err := f.listen(specs, addrs)
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	var wg sync.WaitGroup
	for _, l := range lns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.accept(ctx, stop, l)
		}()
	}
	<-ctx.Done()
	for _, l := range lns {
		_ = l.ln.Close()
	}
	wg.Wait()
	return context.Cause(ctx)
}

// listen opens the listeners. A random local port (0) is chosen by the
// first address and reused on the others, as kubectl does, so 127.0.0.1
// and ::1 forward the same port.
func (f *forwarder) listen(specs []portSpec, addrs []listenAddr) ([]listener, error) {
	var lns []listener
	fail := func(err error) ([]listener, error) {
		for _, l := range lns {
			_ = l.ln.Close()
		}
		return nil, err
	}
	for _, spec := range specs {
		local := spec.Local
		for _, a := range addrs {
			ln, err := net.Listen("tcp", net.JoinHostPort(a.ip, strconv.Itoa(local)))
			if err != nil {
				if a.optional {
					continue
				}
				return fail(fmt.Errorf("listen on %s for %s: %w", net.JoinHostPort(a.ip, strconv.Itoa(local)), spec, err))
			}
			local = ln.Addr().(*net.TCPAddr).Port //nolint:forcetypeassert // a tcp listener
			lns = append(lns, listener{ln: ln, local: local, remote: spec.Remote})
			f.printf(f.out, "Forwarding from %s -> %d\n", ln.Addr(), spec.Remote)
		}
	}
	return lns, nil
}

// accept relays each connection of l until the listener is closed; it
// returns once its relays have ended.
func (f *forwarder) accept(ctx context.Context, stop context.CancelCauseFunc, l listener) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			f.printf(f.errOut, "error: accepting on %s: %v\n", l.ln.Addr(), err)
			time.Sleep(100 * time.Millisecond) // out of descriptors, say: do not spin
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.relay(ctx, stop, c, l)
		}()
	}
}

// relay forwards one local connection through one WebSocket. A refusal
// for good, or a session the controller ended because the pod ended or the
// permission is gone, stops the whole forwarder: no later connection could
// succeed.
func (f *forwarder) relay(ctx context.Context, stop context.CancelCauseFunc, c net.Conn, l listener) {
	defer func() { _ = c.Close() }()
	f.printf(f.out, "Handling connection for %d\n", l.local)
	ws, err := f.dial(ctx, l.remote)
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		if _, final := errors.AsType[*relayRefused](err); final {
			stop(fmt.Errorf("%w: %s:%d: %w", errPortForwardStopped, f.pod, l.remote, err))
			return
		}
		f.printf(f.errOut, "error: forwarding %d -> %s:%d: %v\n", l.local, f.pod, l.remote, err)
		return
	}
	defer func() { _ = ws.Close() }()
	err = bridge(ctx, c, ws)
	var ce *websocket.CloseError
	switch {
	case errors.As(err, &ce) && (ce.Code == websocket.CloseGoingAway || ce.Code == websocket.ClosePolicyViolation):
		stop(fmt.Errorf("%w: %s", errPortForwardStopped, ce.Text))
	case errors.As(err, &ce) && ce.Code != websocket.CloseNormalClosure && ce.Code != websocket.CloseNoStatusReceived:
		f.printf(f.errOut, "error: forwarding %d -> %s:%d: %s\n", l.local, f.pod, l.remote, ce.Text)
	case err != nil && ce == nil && ctx.Err() == nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, errLocalWrite):
		f.printf(f.errOut, "error: forwarding %d -> %s:%d: %v\n", l.local, f.pod, l.remote, err)
	}
}

// bridge copies between the local connection and the WebSocket until the
// controller closes the session (its close frame is the error returned), the
// local connection closes, or ctx ends. A local EOF is sent on as an empty
// message, the API's half-close, and the pod's answer still arrives.
func bridge(ctx context.Context, c net.Conn, ws *websocket.Conn) error {
	fromWS := make(chan error, 1)
	go func() { fromWS <- wsToLocal(ws, c) }()
	toWS := make(chan error, 1)
	go func() { toWS <- localToWS(c, ws) }()
	var err error
	select {
	case err = <-fromWS:
		if errors.Is(err, errLocalWrite) {
			err = closeRelay(ws, nil, "the local connection closed")
		}
	case <-ctx.Done():
		err = closeRelay(ws, fromWS, "the client stopped")
	case lerr := <-toWS:
		toWS = nil
		if lerr != nil {
			err = closeRelay(ws, fromWS, "the local connection closed")
			break
		}
		select { // half-closed: the pod may still answer
		case err = <-fromWS:
		case <-ctx.Done():
			err = closeRelay(ws, fromWS, "the client stopped")
		}
	}
	_ = c.Close()
	_ = ws.Close()
	if toWS != nil {
		<-toWS //nolint:errcheck // the local side's end, reported by the case that saw it
	}
	return err
}

// closeRelay sends a normal close frame and waits briefly for the
// controller's.
func closeRelay(ws *websocket.Conn, fromWS <-chan error, reason string) error {
	_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, reason), time.Now().Add(relayCloseWait))
	if fromWS == nil {
		return nil
	}
	select {
	case <-fromWS: //nolint:errcheck // the controller's close, or the connection's end: either way done
	case <-time.After(relayCloseWait):
	}
	return nil
}

// localToWS sends what the local connection reads as binary messages; at
// its EOF, one empty message.
func localToWS(c net.Conn, ws *websocket.Conn) error {
	buf := make([]byte, relayBuffer)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if werr := ws.WriteMessage(websocket.BinaryMessage, buf[:n]); werr != nil {
				return werr
			}
		}
		if errors.Is(err, io.EOF) {
			return ws.WriteMessage(websocket.BinaryMessage, nil)
		}
		if err != nil {
			return err
		}
	}
}

// errLocalWrite is the local connection not taking what the pod sent.
var errLocalWrite = errors.New("write to the local connection")

// wsToLocal writes the controller's binary messages to the local
// connection until the WebSocket ends, through one buffer for the whole
// relay: io.Copy would take a fresh 32 KiB buffer for every message (a
// TCP connection's ReadFrom falls back to it), and the garbage of a
// thousand small echoes set off the collections that were most of the
// relay's p99 (issue 41).
func wsToLocal(ws *websocket.Conn, c net.Conn) error {
	buf := make([]byte, relayBuffer)
	for {
		mt, rd, err := ws.NextReader()
		if err != nil {
			return err
		}
		if mt != websocket.BinaryMessage {
			continue
		}
		if err := copyMessage(c, rd, buf); err != nil {
			return err
		}
	}
}

// copyMessage writes one message from rd to c through buf. A failed write
// is errLocalWrite; a failed read is the WebSocket's.
func copyMessage(c net.Conn, rd io.Reader, buf []byte) error {
	for {
		n, rerr := rd.Read(buf)
		if n > 0 {
			if _, err := c.Write(buf[:n]); err != nil {
				return fmt.Errorf("%w: %w", errLocalWrite, err)
			}
		}
		if errors.Is(rerr, io.EOF) {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}

func (f *forwarder) printf(w io.Writer, format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fmt.Fprintf(w, format, args...)
}

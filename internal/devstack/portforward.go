package devstack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/vishvananda/netns"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
)

// The runtime answers the kubelet API's portForward, so that the spoke's
// kube-apiserver serves pods/portforward against dev pods exactly as against
// a kubelet: it translates a client's WebSocket to SPDY (the nodes declare
// no WebSocket support) and proxies it here, where cri-streaming's
// ServePortForward — the kubelet's own — takes the streams, and PortForward
// below dials the port on the pod's own loopback, inside its network
// namespace, as the kubelet's CRI does.

// Bounds of a forwarded connection, the kubelet's defaults: an idle
// connection ends after 4 h; a stream pair must arrive within 30 s.
const (
	portForwardIdleTimeout    = 4 * time.Hour
	portForwardStreamCreation = 30 * time.Second
	portDialTimeout           = 5 * time.Second
)

// servePortForward is GET/POST /portForward/{namespace}/{pod}[/{uid}].
func (r *nodeRuntime) servePortForward(w http.ResponseWriter, req *http.Request) {
	if req.TLS == nil || len(req.TLS.VerifiedChains) == 0 {
		http.Error(w, "a client certificate from the stack's CA is required", http.StatusUnauthorized)
		return
	}
	ns, name := req.PathValue("namespace"), req.PathValue("pod")
	p := r.lookup(ns, name)
	if p == nil || (req.PathValue("uid") != "" && req.PathValue("uid") != string(p.uid)) {
		http.Error(w, fmt.Sprintf("pod %s/%s is not running on the nodes of %s", ns, name, r.spoke), http.StatusNotFound)
		return
	}
	opts, err := portforward.NewV4Options(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	portforward.ServePortForward(w, req, podForwarder{r}, ns+"/"+name, string(p.uid), opts,
		portForwardIdleTimeout, portForwardStreamCreation, portforward.SupportedProtocols)
}

// podForwarder dials the pods of one runtime.
type podForwarder struct{ r *nodeRuntime }

// PortForward copies between stream and port on the pod's loopback until
// either side ends.
func (f podForwarder) PortForward(ctx context.Context, _ string, uid string, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	conn, err := f.r.dialPod(uid, port)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(conn, stream)
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.CloseWrite() // the client is done sending; let the pod answer
		}
	}()
	_, err = io.Copy(stream, conn)
	_ = stream.Close()
	wg.Wait()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("copy from port %d: %w", port, err)
	}
	return nil
}

// errNotInNetwork: the pod has no network of its own (not started yet, or
// the runtime gives pods none).
var errNotInNetwork = errors.New("the pod has no network namespace of its own")

// dialPod connects to 127.0.0.1:port inside the network namespace of the
// pod with uid.
func (r *nodeRuntime) dialPod(uid string, port int32) (net.Conn, error) {
	if !r.cfg.PodNetwork {
		return nil, fmt.Errorf("port-forward is unavailable in this dev stack: %w", errNoPodNetwork)
	}
	var pid int
	r.mu.Lock()
	for _, p := range r.pods {
		if string(p.uid) == uid {
			p.mu.Lock()
			pid = p.pid
			p.mu.Unlock()
		}
	}
	r.mu.Unlock()
	if pid == 0 {
		return nil, fmt.Errorf("pod %s: %w", uid, errNotInNetwork)
	}
	return dialInNetns(pid, port)
}

// dialInNetns opens the socket on a thread moved into pid's network
// namespace: a socket belongs to the namespace it was made in. The thread
// is moved back before it is released; if that fails it stays locked, so
// the Go runtime ends it instead of reusing it elsewhere.
func dialInNetns(pid int, port int32) (net.Conn, error) {
	type result struct {
		conn net.Conn
		err  error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{err: fmt.Errorf("current network namespace: %w", err)}
			return
		}
		defer func() { _ = orig.Close() }()
		target, err := netns.GetFromPid(pid)
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{err: fmt.Errorf("the pod's network namespace: %w", err)}
			return
		}
		defer func() { _ = target.Close() }()
		if err := netns.Set(target); err != nil {
			runtime.UnlockOSThread()
			done <- result{err: fmt.Errorf("enter the pod's network namespace: %w", err)}
			return
		}
		conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))), portDialTimeout)
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		if err != nil {
			err = fmt.Errorf("dial port %d in the pod: %w", port, err)
		}
		done <- result{conn, err}
	}()
	res := <-done
	return res.conn, res.err
}

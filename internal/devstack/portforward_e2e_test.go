package devstack_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"

	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
)

// Each dev pod has a network namespace of its own: two pods both listen on
// 127.0.0.1:7777, and the spoke's kube-apiserver forwards pods/portforward
// to the dev runtime, which dials the port inside the pod's namespace, so
// each forward reaches its own pod.
func TestPortForwardReachesEachPodsOwnLoopback(t *testing.T) {
	s := devstacktest.Shared(t)
	if !s.PodNetwork {
		t.Skip("this machine gives dev pods no network namespace")
	}
	spoke := s.Spoke(devstack.DefaultSpokeName)
	names := []string{"echo-a", "echo-b"}
	for _, name := range names {
		createPod(t, spoke, testPod(name, devstack.EchoCommand(7777)...))
	}
	for _, name := range names {
		if line := firstLogLine(t, spoke, name); !strings.HasPrefix(line, "echo: listening") {
			t.Fatalf("%s: first log line %q, want it listening (both pods bind 127.0.0.1:7777)", name, line)
		}
	}
	for _, name := range names {
		conn := forward(t, spoke, name, 7777)
		r := bufio.NewReader(conn)
		banner, err := r.ReadString('\n')
		if err != nil || banner != "echo from "+name+"\n" {
			t.Fatalf("forward to %s: banner %q (%v), want its own pod's", name, banner, err)
		}
		if _, err := fmt.Fprintf(conn, "ping %s\n", name); err != nil {
			t.Fatal(err)
		}
		if got, err := r.ReadString('\n'); err != nil || got != "ping "+name+"\n" {
			t.Fatalf("echo through %s = %q (%v)", name, got, err)
		}
	}
	// A port nothing listens on is refused by the pod, not by the runtime.
	conn := forward(t, spoke, names[0], 7778)
	_ = conn.SetReadDeadline(time.Now().Add(time.Minute))
	if n, err := conn.Read(make([]byte, 1)); err == nil {
		t.Fatalf("read %d bytes from a port nothing listens on", n)
	}
}

// forward opens a port-forward to pod:port through the spoke's API server
// as its admin (SPDY, as kube-apiserver speaks to kubelets) and returns a
// local connection through it, closed with the test.
func forward(t *testing.T, spoke *devstack.Cluster, pod string, port int) net.Conn {
	t.Helper()
	transport, upgrader, err := spdy.RoundTripperFor(spoke.Admin)
	if err != nil {
		t.Fatal(err)
	}
	url := spoke.Client.CoreV1().RESTClient().Post().Resource("pods").Namespace(devstack.SpokeNamespace).Name(pod).SubResource("portforward").URL()
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, url)
	stop, ready := make(chan struct{}), make(chan struct{})
	pf, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", port)}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- pf.ForwardPorts() }()
	t.Cleanup(func() { close(stop); <-errc })
	select {
	case <-ready:
	case err := <-errc:
		t.Fatalf("port-forward to %s: %v", pod, err)
	}
	ports, err := pf.GetPorts()
	if err != nil || len(ports) != 1 {
		t.Fatalf("forwarded ports %v: %v", ports, err)
	}
	conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", ports[0].Local))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

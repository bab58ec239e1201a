package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
	"crucible.dev/crucible/internal/render"
)

// echoPod submits a work pod serving devstack's TCP echo on 7777 (its
// first line to a connection names the pod) and waits until it runs.
func echoPod(t testing.TB, s *devstack.Stack, cluster string) apiv1.WorkPod {
	t.Helper()
	wp := submit(t, s, apiv1.SubmitRequest{Cluster: cluster, Image: "busybox", Command: devstack.EchoCommand(7777)})
	t.Cleanup(func() { cancelPodQuietly(s, wp.ID) })
	waitRunning(t, s, wp.ID)
	return wp
}

// waitEchoing waits until a session to the pod gets its echo's banner: the
// pod runs before its echo listens.
func waitEchoing(t testing.TB, s *devstack.Stack, id string) {
	t.Helper()
	waitEchoingAs(t, s, id, nil)
}

// waitEchoingAs is waitEchoing with the caller's header (its bearer token).
func waitEchoingAs(t testing.TB, s *devstack.Stack, id string, header http.Header) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		ws, code, msg := wsDial(t, s, id, 7777, header)
		if ws == nil {
			last = fmt.Sprintf("%d %s", code, msg)
			return false, nil
		}
		defer ws.Close()
		_ = ws.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, banner, err := ws.ReadMessage()
		last = fmt.Sprintf("banner %q, %v", banner, err)
		return err == nil && string(banner) == "echo from "+id+"\n", nil
	})
	if err != nil {
		t.Fatalf("%s never echoed: %s", id, last)
	}
}

// forwardCmd is a running `crucible port-forward`.
type forwardCmd struct {
	cmd    *exec.Cmd
	addr   string // the first local listener, host:port
	stderr *bytes.Buffer
	done   chan error
}

// startPortForward runs `crucible port-forward` (or run-live) against the
// stack's controller and waits for its first "Forwarding from" line.
func startPortForward(t testing.TB, s *devstack.Stack, args ...string) *forwardCmd {
	t.Helper()
	argv := append([]string{args[0], "--server", s.Federation.ControllerInternalURL, "--address", "127.0.0.1"}, args[1:]...)
	return startForwarder(t, exec.Command(devstacktest.CrucibleBinary(t), argv...))
}

// startForwarder starts cmd, a `crucible port-forward` or a `kubectl
// port-forward` (both print kubectl's "Forwarding from" line), and waits
// for its first local listener.
func startForwarder(t testing.TB, cmd *exec.Cmd) *forwardCmd {
	t.Helper()
	args := cmd.Args[1:]
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	f := &forwardCmd{cmd: cmd, stderr: &bytes.Buffer{}, done: make(chan error, 1)}
	cmd.Stderr = f.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		f.done <- cmd.Wait()
	}()
	t.Cleanup(func() { f.stop(t) })
	re := regexp.MustCompile(`^Forwarding from (127\.0\.0\.1:\d+) -> \d+$`)
	timeout := time.After(time.Minute)
	for {
		select {
		case l := <-lines:
			if m := re.FindStringSubmatch(l); m != nil {
				f.addr = m[1]
				return f
			}
		case err := <-f.done:
			f.done <- err
			t.Fatalf("%v ended before listening: %v\n%s", args, err, f.stderr)
		case <-timeout:
			t.Fatalf("%v did not listen within a minute\n%s", args, f.stderr)
		}
	}
}

// stop is Ctrl-C: the command exits 130.
func (f *forwardCmd) stop(t testing.TB) {
	_ = f.cmd.Process.Signal(os.Interrupt) // fails when it has ended
	select {
	case err := <-f.done:
		f.done <- err
	case <-time.After(30 * time.Second):
		_ = f.cmd.Process.Kill()
		t.Errorf("port-forward still running 30s after Ctrl-C\n%s", f.stderr)
	}
}

// connect opens a connection through the forward and reads the echo's
// banner.
func (f *forwardCmd) connect(t testing.TB) (net.Conn, *bufio.Reader, string) {
	t.Helper()
	c, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(3 * time.Minute))
	r := bufio.NewReaderSize(c, 64<<10)
	banner, err := r.ReadString('\n')
	if err != nil {
		c.Close()
		t.Fatalf("banner: %q, %v", banner, err)
	}
	return c, r, strings.TrimSuffix(banner, "\n")
}

// roundTrip sends n random bytes and reads them back, comparing SHA-256s
// of what went and what came.
func roundTrip(c net.Conn, r io.Reader, n int64) error {
	sent := sha256.New()
	errc := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.MultiWriter(c, sent), io.LimitReader(rand.Reader, n))
		errc <- err
	}()
	got := sha256.New()
	if _, err := io.CopyN(got, r, n); err != nil {
		return fmt.Errorf("read back: %w", err)
	}
	if err := <-errc; err != nil {
		return fmt.Errorf("send: %w", err)
	}
	if !bytes.Equal(sent.Sum(nil), got.Sum(nil)) {
		return errors.New("the echo differs from what was sent")
	}
	return nil
}

// Issue 24, acceptance: two pods on wharf both serve an echo on 7777 and
// `crucible port-forward` to each reaches its own pod; 64 MiB through one
// session arrive byte for byte both ways; 50 concurrent sessions to one pod
// all complete intact.
func TestPortForwardEachPodItsOwn(t *testing.T) {
	s := sharedStack(t)
	if !s.PodNetwork {
		t.Skip("this machine gives dev pods no network namespace: run-live is unavailable")
	}
	a, b := echoPod(t, s, "wharf"), echoPod(t, s, "wharf")
	waitEchoing(t, s, a.ID)
	waitEchoing(t, s, b.ID)
	fa := startPortForward(t, s, "port-forward", a.ID, ":7777")
	fb := startPortForward(t, s, "port-forward", b.ID, "0:7777")
	for _, tc := range []struct {
		f  *forwardCmd
		id string
	}{{fa, a.ID}, {fb, b.ID}} {
		c, _, banner := tc.f.connect(t)
		c.Close()
		if banner != "echo from "+tc.id {
			t.Errorf("forward to %s: banner %q, want its own pod's", tc.id, banner)
		}
	}

	c, r, _ := fa.connect(t)
	if err := roundTrip(c, r, 64<<20); err != nil {
		t.Fatalf("64 MiB through one session: %v", err)
	}
	c.Close()

	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", fb.addr)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(3 * time.Minute))
			r := bufio.NewReader(c)
			if banner, err := r.ReadString('\n'); err != nil || banner != "echo from "+b.ID+"\n" {
				errs <- fmt.Errorf("session %d: banner %q: %w", i, banner, err)
				return
			}
			if err := roundTrip(c, r, 256<<10); err != nil {
				errs <- fmt.Errorf("session %d: %w", i, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.Logf("port-forward's stderr:\n%s", fb.stderr)
	}
}

// wsDial opens a session straight to the API, as a client other than the
// CLI would.
func wsDial(t testing.TB, s *devstack.Stack, id string, port int, header http.Header) (*websocket.Conn, int, string) {
	t.Helper()
	u := strings.Replace(s.Federation.ControllerInternalURL, "http://", "ws://", 1) + fmt.Sprintf("/api/pods/%s/portforward?port=%d", id, port)
	ws, resp, err := websocket.DefaultDialer.DialContext(t.Context(), u, header)
	if err == nil {
		return ws, http.StatusSwitchingProtocols, ""
	}
	if resp == nil {
		t.Fatalf("dial %s: %v", u, err)
	}
	defer resp.Body.Close()
	var e struct{ Error string }
	body, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(body, &e)
	return nil, resp.StatusCode, e.Error
}

// readUntilClose reads a session's messages until its close frame.
func readUntilClose(t *testing.T, ws *websocket.Conn, within time.Duration) *websocket.CloseError {
	t.Helper()
	_ = ws.SetReadDeadline(time.Now().Add(within))
	for {
		_, _, err := ws.ReadMessage()
		var ce *websocket.CloseError
		if errors.As(err, &ce) {
			return ce
		}
		if err != nil {
			t.Fatalf("the session ended without a close frame: %v", err)
		}
	}
}

// A port outside run_live_ports is 403 naming the allowed ones, and an
// upgrade from a foreign Origin is 403; the pod ending mid-session ends it
// with a clear close reason; the spoke's API server restarting mid-session
// fails that session cleanly, and the next one works.
func TestPortForwardRefusalsAndEndings(t *testing.T) {
	s := sharedStack(t)
	if !s.PodNetwork {
		t.Skip("this machine gives dev pods no network namespace: run-live is unavailable")
	}
	p := echoPod(t, s, "wharf")
	waitEchoing(t, s, p.ID)
	if _, code, msg := wsDial(t, s, p.ID, 7778, nil); code != 403 || !strings.Contains(msg, "run_live_ports allows 7777") {
		t.Errorf("port 7778: %d %q, want 403 naming 7777", code, msg)
	}
	if _, code, msg := wsDial(t, s, p.ID, 7777, http.Header{"Origin": {"https://evil.example"}}); code != 403 || !strings.Contains(msg, "cross-origin WebSocket refused") {
		t.Errorf("foreign Origin: %d %q, want 403", code, msg)
	}

	// The spoke's API server restarts mid-session.
	wharf := s.Spoke("wharf")
	ws, code, msg := wsDial(t, s, p.ID, 7777, nil)
	if code != http.StatusSwitchingProtocols {
		t.Fatalf("session: %d %s", code, msg)
	}
	if _, banner, err := ws.ReadMessage(); err != nil || string(banner) != "echo from "+p.ID+"\n" {
		t.Fatalf("banner %q, %v", banner, err)
	}
	restoreSpokeAfter(t, s, wharf)
	if err := s.StopAPIServer(wharf); err != nil {
		t.Fatal(err)
	}
	if ce := readUntilClose(t, ws, 2*time.Minute); ce.Code != websocket.CloseInternalServerErr || !strings.Contains(ce.Text, "wharf") {
		t.Errorf("spoke restart: close %d %q, want 1011 naming wharf", ce.Code, ce.Text)
	}
	ws.Close()
	if err := s.StartAPIServer(t.Context(), wharf); err != nil {
		t.Fatal(err)
	}
	if err := s.SettleSpoke(t.Context(), wharf); err != nil {
		t.Fatal(err)
	}
	var next *websocket.Conn
	err := wait.PollUntilContextTimeout(t.Context(), time.Second, 2*time.Minute, true, func(context.Context) (bool, error) {
		next, code, msg = wsDial(t, s, p.ID, 7777, nil)
		return code == http.StatusSwitchingProtocols, nil
	})
	if err != nil {
		t.Fatalf("after the restart: still %d %s", code, msg)
	}
	if _, banner, err := next.ReadMessage(); err != nil || string(banner) != "echo from "+p.ID+"\n" {
		t.Fatalf("after the restart: banner %q, %v", banner, err)
	}

	// The pod ends mid-session.
	cancelPod(t, s, p.ID)
	if ce := readUntilClose(t, next, 2*time.Minute); ce.Code != websocket.CloseGoingAway || !strings.HasPrefix(ce.Text, "work pod "+p.ID+" ended: cancelled") {
		t.Errorf("pod ended: close %d %q, want 1001 saying it ended", ce.Code, ce.Text)
	}
	next.Close()
}

// Without run_live on a cluster a port-forward is 409 naming the key, and
// that spoke's RBAC grants the controller no pods/portforward (kubectl auth
// can-i as the controller's identity; wharf's, with run_live, does). With
// auth "kubernetes": a viewer without workpods/portforward is 403, and one
// with it on dock but not wharf is 403 for wharf's pods.
func TestPortForwardRunLiveOffAndPermissions(t *testing.T) {
	t.Parallel() // a stack of its own: see doc.go
	s := ownStack(t, devstack.Options{
		Crucible: devstacktest.BuildCrucible, Spokes: []devstack.SpokeOptions{{Name: "wharf"}, {Name: "dock", NoRunLive: true}},
		MirrorTTL: time.Second, MirrorMaxStale: 8 * time.Second, SweepInterval: 2 * time.Second,
		OrphanGrace: orphanGrace, RetryBudget: 90 * time.Second,
	})
	if !s.PodNetwork {
		t.Skip("this machine gives dev pods no network namespace: run-live is unavailable")
	}
	for _, tc := range []struct{ spoke, want string }{{"wharf", "yes"}, {"dock", "no"}} {
		spoke := s.Spoke(tc.spoke)
		kc := credentialKubeconfig(t, s, spoke, s.Federation.SpokeTokenFiles[spoke.Name])
		out, _ := kubectl(t, kc, "auth", "can-i", "create", "pods", "--subresource=portforward", "-n", devstack.SpokeNamespace)
		if strings.TrimSpace(out) != tc.want {
			t.Errorf("%s: the controller can-i create pods/portforward = %q, want %s", tc.spoke, out, tc.want)
		}
	}
	onWharf, onDock := echoPod(t, s, "wharf"), echoPod(t, s, "dock")
	if _, code, msg := wsDial(t, s, onDock.ID, 7777, nil); code != 409 || !strings.Contains(msg, `clusters[1].run_live = true (the [[clusters]] entry named "dock")`) {
		t.Errorf("dock without run_live: %d %q, want 409 naming clusters[1].run_live", code, msg)
	}

	base, err := os.ReadFile(s.Federation.ProfileFile)
	if err != nil {
		t.Fatal(err)
	}
	applyHub(t, s, render.HubRBAC(devstack.HubNamespace, devstack.HubServiceAccount)...)
	applyHub(t, s, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "pf-dock"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"crucible.dev"}, Resources: []string{"workpods/portforward"},
			Verbs: []string{"create", "create-any"}, ResourceNames: []string{"dock"}}}, // the pods are not pf-dock's own
	})
	for _, name := range []string{"pf-none", "pf-dock"} {
		hubServiceAccount(t, s, name)
		grant(t, s, name+"-views", render.HubViewerName, saSubject(name))
	}
	grant(t, s, "pf-dock", "pf-dock", saSubject("pf-dock"))
	withAPISection(t, s, string(base), "auth = \"kubernetes\"\naccess_allow_ttl = \"1s\"\naccess_deny_ttl = \"1s\"\n")
	bearer := func(sa string) http.Header {
		return http.Header{"Authorization": {"Bearer " + hubToken(t, s, sa, devstack.Issuer)}}
	}
	if _, code, msg := wsDial(t, s, onWharf.ID, 7777, bearer("pf-none")); code != 403 || !strings.Contains(msg, "workpods/portforward") {
		t.Errorf("a viewer without workpods/portforward: %d %q, want 403", code, msg)
	}
	if _, code, msg := wsDial(t, s, onWharf.ID, 7777, bearer("pf-dock")); code != 403 || !strings.Contains(msg, "workpods/portforward") {
		t.Errorf("workpods/portforward on dock only, a wharf pod: %d %q, want 403", code, msg)
	}
	if _, code, msg := wsDial(t, s, onDock.ID, 7777, bearer("pf-dock")); code != 409 {
		t.Errorf("workpods/portforward on dock, a dock pod: %d %q, want 409 (allowed, but run_live is off)", code, msg)
	}
}

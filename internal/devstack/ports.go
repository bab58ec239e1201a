package devstack

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// freePort returns an unused loopback port (see freePorts).
func (s *Stack) freePort() (int, error) {
	ports, err := s.freePorts(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// freePorts returns n unused loopback ports, chosen below the kernel's
// ephemeral range, and claims them for the stack until Stop. A port from
// "127.0.0.1:0" is an ephemeral one: between its choice and the bind of the
// process that uses it (seconds, for the controller, which starts after the
// clusters) the kernel may hand it to any outgoing connection as its local
// port, and the bind fails with "address already in use" (seen in a CI run
// with several stacks). Ports below the range are never given out that
// way; but another stack, in this process or another (go test runs
// packages side by side, each with stacks), may choose the same one at
// random in that window — a CI run saw a webhook's bind fail so. The claim
// (claimPort) rules that out: a port is chosen only if no stack on the
// machine holds it.
func (s *Stack) freePorts(n int) ([]int, error) {
	// Hold every listener until all are chosen so that one call never returns
	// the same port twice.
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	lo, hi := portRange()
	ports := make([]int, 0, n)
	for attempts := 0; len(ports) < n; attempts++ {
		if attempts > 100*n {
			releasePorts(ports)
			return nil, fmt.Errorf("find a free port: none free of %d tried in [%d, %d)", attempts, lo, hi)
		}
		port := lo + rand.IntN(hi-lo)
		if !claimPort(port) {
			continue // another stack's
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			releasePorts([]int{port})
			continue // taken
		}
		ls = append(ls, l)
		ports = append(ports, port)
	}
	s.portsMu.Lock()
	s.ports = append(s.ports, ports...)
	s.portsMu.Unlock()
	return ports, nil
}

// claims are the ports claimed by this process's stacks: an open file
// each, holding an exclusive flock(2) on a file named for the port in
// claimsDir, which every stack on the machine checks. The kernel drops the
// locks with the process, so a crashed test leaves no claim behind.
var claims = struct {
	sync.Mutex
	files map[int]*os.File
}{files: map[int]*os.File{}}

// claimsDir holds one lock file per port ever claimed on this machine.
func claimsDir() string { return filepath.Join(os.TempDir(), "crucible-devstack-ports") }

// claimPort claims port for this process unless a stack (here or in
// another process) holds it. Where no lock file can be made (a read-only
// temporary directory), it claims without one, as before there were
// claims.
func claimPort(port int) bool {
	claims.Lock()
	defer claims.Unlock()
	if _, held := claims.files[port]; held {
		return false
	}
	dir := claimsDir()
	if err := os.MkdirAll(dir, 0o777); err != nil {
		claims.files[port] = nil
		return true
	}
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		claims.files[port] = nil
		return true
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		return false // another process's stack holds it
	}
	claims.files[port] = f
	return true
}

// releasePorts gives up claims: closing a lock file drops its lock.
func releasePorts(ports []int) {
	claims.Lock()
	defer claims.Unlock()
	for _, port := range ports {
		if f, held := claims.files[port]; held {
			if f != nil {
				_ = f.Close()
			}
			delete(claims.files, port)
		}
	}
}

// portRange is where freePorts chooses: the 12,000 ports below the kernel's
// ephemeral range (ip_local_port_range; Linux's default starts at 32768).
func portRange() (lo, hi int) {
	hi = 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v > 2048 {
				hi = v
			}
		}
	}
	return max(1024, hi-12000), hi
}

package devstack

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// freePort returns an unused loopback port (see freePorts).
func freePort() (int, error) {
	ports, err := freePorts(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// freePorts returns n unused loopback ports, chosen below the kernel's
// ephemeral range. A port from "127.0.0.1:0" is an ephemeral one: between
// its choice and the bind of the process that uses it (seconds, for the
// controller, which starts after the clusters) the kernel may hand it to any
// outgoing connection as its local port, and the bind fails with "address
// already in use" (seen in a CI run with several stacks). Ports below the
// range are never given out that way; only another stack choosing the same
// one at random could take it.
func freePorts(n int) ([]int, error) {
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
			return nil, fmt.Errorf("find a free port: none free of %d tried in [%d, %d)", attempts, lo, hi)
		}
		port := lo + rand.IntN(hi-lo)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue // taken
		}
		ls = append(ls, l)
		ports = append(ports, port)
	}
	return ports, nil
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

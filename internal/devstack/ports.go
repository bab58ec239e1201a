package devstack

import (
	"fmt"
	"net"
)

// freePort asks the kernel for an unused loopback port. The port is free when
// returned; the process that binds it follows within milliseconds, so stacks in
// parallel test packages do not collide in practice.
func freePort() (int, error) {
	ports, err := freePorts(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

func freePorts(n int) ([]int, error) {
	// Hold every listener until all are chosen so that one call never returns
	// the same port twice.
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

package devstack

import "fmt"

// StartProcess runs a program that is not part of the stack itself — the
// interop test's Kueue managers — as one of its processes: its output goes
// to LogFile(name), a failed test shows the end of it, and Stop ends it with
// the node agents, before the API servers it talks to.
func (s *Stack) StartProcess(name, path string, args ...string) (pid int, err error) {
	if s.proc(name) != nil {
		return 0, fmt.Errorf("start %s: the stack runs a process of that name already", name)
	}
	p, err := s.start(name, path, args)
	if err != nil {
		return 0, err
	}
	return p.PID(), nil
}

// IssueServingCert signs, with the stack's CA (CAFile), a serving
// certificate for 127.0.0.1, localhost and PodGateway, written as
// dir/name.crt and dir/name.key: what a webhook server the stack's API
// servers call on loopback presents.
func (s *Stack) IssueServingCert(dir, name string) (KeyPair, error) {
	return s.ca.issue(dir, name, certSpec{CommonName: name, Server: true})
}

package devstack

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
)

// Tests use these to take parts of a running stack away and bring them back:
// an API server outage, a signing-key rotation.

// StopAPIServer stops c's kube-apiserver, as an outage would. Clients of c
// then fail with connection errors until StartAPIServer.
func (s *Stack) StopAPIServer(c *Cluster) error {
	p := s.proc("kube-apiserver-" + c.Name)
	if p == nil {
		return fmt.Errorf("no kube-apiserver for %s", c.Name)
	}
	p.stop(stopGrace)
	return nil
}

// StartAPIServer starts c's kube-apiserver again on the same port with the
// same flags (or with args, if given) and waits until it is ready.
func (s *Stack) StartAPIServer(ctx context.Context, c *Cluster) error {
	return s.restartAPIServer(ctx, c, nil)
}

func (s *Stack) restartAPIServer(ctx context.Context, c *Cluster, args []string) error {
	return s.restart(ctx, "kube-apiserver-"+c.Name, args, c.Ready)
}

// RotateServiceAccountKey gives c a new signing key, keeping the old one as a
// verification key, as an operator rotating keys would: tokens signed before
// stay valid, new tokens carry the new key id, and the JWKS lists both.
func (s *Stack) RotateServiceAccountKey(ctx context.Context, c *Cluster) error {
	name := "kube-apiserver-" + c.Name
	old := s.proc(name)
	if old == nil {
		return fmt.Errorf("no kube-apiserver for %s", c.Name)
	}
	n := 1
	for _, a := range old.args {
		if strings.HasPrefix(a, "--service-account-key-file=") {
			n++
		}
	}
	key, err := newServiceAccountKey(c.dir, fmt.Sprintf("service-account-%d", n))
	if err != nil {
		return err
	}
	var args []string
	for _, a := range old.args {
		if strings.HasPrefix(a, "--service-account-signing-key-file=") {
			a = "--service-account-signing-key-file=" + key.PrivateFile
		}
		args = append(args, a)
	}
	args = append(args, "--service-account-key-file="+key.PublicFile)
	if err := s.restartAPIServer(ctx, c, args); err != nil {
		return err
	}
	c.ServiceAccountKey = key
	return nil
}

// KillProcess kills a process of the stack with SIGKILL, as a crash would:
// no shutdown handler runs.
func (s *Stack) KillProcess(name string) error {
	p := s.proc(name)
	if p == nil {
		return fmt.Errorf("no process %s", name)
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	return nil
}

// RestartProcess starts a stopped or killed process again with the same
// command line and waits until ready reports nil.
func (s *Stack) RestartProcess(ctx context.Context, name string, ready func(context.Context) error) error {
	return s.restart(ctx, name, nil, ready)
}

// restart stops the process called name if it still runs, starts it again
// with args (nil: its old ones) and waits until ready reports nil. A detached
// stack's record then names the new PID.
func (s *Stack) restart(ctx context.Context, name string, args []string, ready func(context.Context) error) error {
	i := slices.IndexFunc(s.procs, func(p *process) bool { return p.Name == name })
	if i < 0 {
		return fmt.Errorf("no process %s", name)
	}
	old := s.procs[i]
	old.stop(stopGrace)
	if args == nil {
		args = old.args
	}
	p, err := startProcess(name, old.path, args, old.LogFile, s.opts.Detached)
	if err != nil {
		return err
	}
	s.procs[i] = p
	if err := p.waitReady(ctx, startTimeout, ready); err != nil {
		return err
	}
	if s.opts.Detached {
		return s.writeState()
	}
	return nil
}

// ControllerReady is the readiness check of the stack's controller.
func (s *Stack) ControllerReady(ctx context.Context) error {
	return get(ctx, s.httpClient(), s.Federation.ControllerInternalURL+"/readyz")
}

// WebhookReady is the readiness check of spoke's authn webhook as its
// kube-apiserver sees it: over TLS, with the apiserver's client certificate.
func (s *Stack) WebhookReady(spoke string) func(context.Context) error {
	return func(ctx context.Context) error {
		c, err := s.httpClientAs(s.Federation.WebhookClientCerts[spoke])
		if err != nil {
			return err
		}
		return get(ctx, c, s.Federation.WebhookURLs[spoke]+"/readyz")
	}
}

// PauseProcess stops a process of the stack with SIGSTOP: it keeps its
// sockets, so clients connect and then hear nothing — an unreachable host,
// not a refused connection. ResumeProcess continues it.
func (s *Stack) PauseProcess(name string) error {
	return s.signal(name, syscall.SIGSTOP)
}

// ResumeProcess continues a process PauseProcess stopped (SIGCONT).
func (s *Stack) ResumeProcess(name string) error {
	return s.signal(name, syscall.SIGCONT)
}

// signal sends sig to a running process of the stack, by its PID only.
func (s *Stack) signal(name string, sig syscall.Signal) error {
	p := s.proc(name)
	if p == nil {
		return fmt.Errorf("no process %s", name)
	}
	if p.exited() {
		return fmt.Errorf("signal %s: %w", name, ErrProcessExited)
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %s: %w", name, err)
	}
	return nil
}

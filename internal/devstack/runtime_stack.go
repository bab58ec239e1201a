package devstack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
)

// startRuntime starts the dev runtime for every spoke: in this process, or
// for a detached stack (or with RuntimeProcess) as `crucible dev runtime`, a
// process of the stack.
func (s *Stack) startRuntime(ctx context.Context, ports []int) error {
	cfg := RuntimeConfig{
		Dir:      s.Dir,
		CertFile: filepath.Join(s.Dir, "pki", "serving.crt"),
		KeyFile:  filepath.Join(s.Dir, "pki", "serving.key"),
		CAFile:   s.CAFile,
		Detached: s.opts.Detached,
	}
	cfg.Crucible = s.crucibleBinary()
	cfg.Isolation, cfg.PodNetwork = s.PodIsolation, s.PodNetwork
	for i, c := range s.servers() {
		cfg.Spokes = append(cfg.Spokes, RuntimeSpoke{Name: c.Name, Kubeconfig: c.KubeconfigFile, Nodes: nodeNames(c.Nodes), Port: ports[i]})
	}
	if !s.opts.Detached && !s.opts.RuntimeProcess {
		h, err := startRuntime(ctx, cfg, s.opts.Progress)
		if err != nil {
			return err
		}
		s.runtime = h
		return nil
	}
	data, _ := json.MarshalIndent(cfg, "", "  ")
	if err := os.WriteFile(filepath.Join(s.Dir, runtimeConfigFile), data, 0o600); err != nil {
		return err
	}
	bin := s.opts.RuntimeBinary
	if bin == "" {
		bin = s.opts.Crucible
	}
	p, err := s.start("crucible-dev-runtime", bin, []string{"dev", "runtime", "--dir=" + s.Dir})
	if err != nil {
		return err
	}
	return p.waitReady(ctx, startTimeout, func(ctx context.Context) error {
		for _, port := range ports {
			if err := get(ctx, selfSignedClient, "https://127.0.0.1:"+strconv.Itoa(port)+"/healthz"); err != nil {
				return err
			}
		}
		return nil
	})
}

// crucibleBinary is the crucible every pod runs as `crucible` (so that
// `crucible push` works in a dev pod): the stack's crucible binary, else
// this program when it is crucible, else a crucible beside this program
// (a test binary's); "" when there is none.
func (s *Stack) crucibleBinary() string {
	for _, bin := range []string{s.opts.Crucible, s.opts.RuntimeBinary} {
		if bin != "" {
			if abs, err := filepath.Abs(bin); err == nil {
				return abs
			}
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	if filepath.Base(exe) == "crucible" {
		return exe
	}
	if beside := filepath.Join(filepath.Dir(exe), "crucible"); fileExists(beside) {
		return beside
	}
	return ""
}

// choosePodIsolation decides, before anything depends on it, how the dev
// runtime will run pods: in mount and network namespaces of their own where
// the machine allows, and says once what is lost where it does not.
func (s *Stack) choosePodIsolation() {
	s.PodIsolation = IsolationMountNamespace
	if err := s.chooseIsolation(); err != nil {
		s.PodIsolation = IsolationPaths
		s.opts.Progress("dev runtime: %v", err)
		s.opts.Progress("dev runtime: %v", errNoPodNetwork)
		return
	}
	if s.opts.NoPodNetwork {
		s.opts.Progress("dev runtime: %v (NoPodNetwork is set)", errNoPodNetwork)
		return
	}
	if err := probePodNetwork(); err != nil {
		s.opts.Progress("dev runtime: %v (this machine refused one: %v)", errNoPodNetwork, err)
		return
	}
	s.PodNetwork = true
}

// podHost is the host address the controller's external listener binds and
// its URL names: the pods' gateway where pods have networks, else loopback.
func (s *Stack) podHost() string {
	if s.PodNetwork {
		return PodGateway.String()
	}
	return "127.0.0.1"
}

// errNoMountNamespace explains, once per `dev up`, what differs when pods
// cannot get a private mount namespace.
var errNoMountNamespace = errors.New("pods run without a private mount namespace, so their volumes are NOT at their mountPath: " +
	"each volume stays in the pod's own directory, env values naming a mountPath (or a path below one, such as " +
	"CRUCIBLE_INGEST_TOKEN_FILE) are rewritten to point there, and a command that hard-codes a mountPath will not find it")

// chooseIsolation reports why pods cannot have a private mount namespace, or
// nil if they can.
func (s *Stack) chooseIsolation() error {
	if s.opts.NoPodMountNamespace {
		return fmt.Errorf("%w (NoPodMountNamespace is set)", errNoMountNamespace)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w (not root; pods also run as your user, not nobody)", errNoMountNamespace)
	}
	if err := probeMountNamespace(); err != nil {
		return fmt.Errorf("%w (this machine refused one: %w)", errNoMountNamespace, err)
	}
	return nil
}

// probeMountNamespace starts the pod helper in a new mount namespace and has
// it mount a tmpfs, the least a pod's volumes need.
func probeMountNamespace() error { return probeNamespaces(syscall.CLONE_NEWNS) }

// probeNamespaces starts the pod helper in new namespaces of the given
// kinds (a mount namespace among them) and has it mount a tmpfs.
func probeNamespaces(flags uintptr) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "crucible-probe-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	spec, _ := json.Marshal(execSpec{Probe: dir})
	specFile := filepath.Join(dir, "exec.json")
	if err := os.WriteFile(specFile, spec, 0o600); err != nil {
		return err
	}
	cmd := exec.Command(self)
	cmd.Env = []string{podExecEnv + "=" + specFile}
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: flags, Pdeathsig: syscall.SIGKILL}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%w: %s", err, out)
	}
	return nil
}

// errRuntimeDetached: the runtime runs in another process.
var errRuntimeDetached = errors.New("the dev runtime runs in another process")

// PodLogRequests is how many pods/log requests for pod namespace/name the
// spoke's API server made to the dev runtime (the kubelet) so far: one per
// pods/log request at the API server, counted per pod, so that a test can
// count one pod's log streams while other pods' logs are read. Attached
// stacks only.
func (s *Stack) PodLogRequests(spoke *Cluster, namespace, name string) (int, error) {
	if s.runtime == nil {
		return 0, errRuntimeDetached
	}
	for _, n := range s.runtime.nodes {
		if n.spoke == spoke.Name {
			n.mu.Lock()
			defer n.mu.Unlock()
			return n.logRequests[namespace+"/"+name], nil
		}
	}
	return 0, fmt.Errorf("no spoke %s in the dev runtime", spoke.Name)
}

func fileExists(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular()
}

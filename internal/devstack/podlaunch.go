package devstack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// podUser is who pod processes run as: nobody when the runtime is root, the
// runtime's own user otherwise.
type podUser struct {
	set      bool
	uid, gid int
}

func currentPodUser() podUser {
	if os.Geteuid() != 0 {
		return podUser{}
	}
	u := podUser{set: true, uid: 65534, gid: 65534}
	if nobody, err := user.Lookup("nobody"); err == nil {
		u.uid, _ = strconv.Atoi(nobody.Uid)
		u.gid, _ = strconv.Atoi(nobody.Gid)
	}
	return u
}

// chown gives path to the pod's user, so that a 0600 token is readable by it.
func (u podUser) chown(path string) error {
	if !u.set {
		return nil
	}
	return os.Lchown(path, u.uid, u.gid)
}

// launch prepares the pod's volumes, env and log and starts its process.
func (r *nodeRuntime) launch(ctx context.Context, p *podRun, pod *corev1.Pod) (*podProcess, error) {
	if len(pod.Spec.Containers) == 0 {
		return nil, &podFailure{Reason: "DevRuntimeNeedsCommand", Message: "the pod has no container"}
	}
	c := pod.Spec.Containers[0]
	if len(c.Command) == 0 {
		return nil, &podFailure{Reason: "DevRuntimeNeedsCommand", Message: fmt.Sprintf(
			"the dev runtime runs the first container's command as a local process and ignores its image (%s), so container %q needs a command", c.Image, c.Name)}
	}
	who := currentPodUser()
	dir := filepath.Join(r.podBase, string(pod.UID))
	work := filepath.Join(dir, "work")
	for _, d := range []string{dir, filepath.Join(dir, "volumes"), work} {
		if err := os.Mkdir(d, 0o711); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, err
		}
	}
	if err := os.Chmod(work, 0o755); err != nil {
		return nil, err
	}
	if err := who.chown(work); err != nil {
		return nil, err
	}
	auxCtx, stopAux := context.WithCancel(ctx)
	ok := false
	defer func() {
		if !ok {
			stopAux()
		}
	}()
	mounts, err := r.prepareVolumes(auxCtx, p, pod, c, filepath.Join(dir, "volumes"), who)
	if err != nil {
		return nil, err
	}
	env, err := r.containerEnv(ctx, pod, c, work)
	if err != nil {
		return nil, err
	}
	lookup := envLookup(env)
	argv := make([]string, 0, len(c.Command)+len(c.Args))
	for _, a := range slices.Concat(c.Command, c.Args) {
		argv = append(argv, expandEnv(a, lookup))
	}
	spec := execSpec{Dir: work, Argv: argv, SetUser: who.set, UID: who.uid, GID: who.gid, Pdeathsig: !r.cfg.Detached, WaitNetwork: r.cfg.PodNetwork}
	if c.WorkingDir != "" {
		spec.Dir = c.WorkingDir
	}
	if r.cfg.Isolation == IsolationMountNamespace {
		spec.Mounts = mounts
		spec.Env = env
	} else {
		spec.Env = rewritePaths(env, mounts)
	}
	return r.start(p, pod, dir, spec, stopAux, &ok)
}

// start starts the helper that becomes the pod process (see podexec.go).
func (r *nodeRuntime) start(p *podRun, pod *corev1.Pod, dir string, spec execSpec, stopAux context.CancelFunc, ok *bool) (*podProcess, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find the runtime's binary: %w", err)
	}
	specFile := filepath.Join(dir, "exec.json")
	data, _ := json.Marshal(spec)
	if err := os.WriteFile(specFile, data, 0o600); err != nil {
		return nil, err
	}
	log, err := r.newLog(pod)
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		log.abandon()
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		log.abandon()
		outR.Close()
		outW.Close()
		return nil, err
	}
	cmd := &exec.Cmd{
		Path: self, Args: []string{"crucible-dev-pod", pod.Namespace + "/" + pod.Name},
		Env:    []string{podExecEnv + "=" + specFile},
		Stdout: outW, Stderr: errW,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	if spec.Pdeathsig {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if r.cfg.Isolation == IsolationMountNamespace {
		cmd.SysProcAttr.Unshareflags = syscall.CLONE_NEWNS
	}
	var netReady *os.File
	if spec.WaitNetwork {
		var childEnd *os.File
		if childEnd, netReady, err = os.Pipe(); err != nil {
			log.abandon()
			outR.Close()
			errR.Close()
			return nil, err
		}
		defer childEnd.Close()
		cmd.ExtraFiles = []*os.File{childEnd} // fd 3: networkReadyFD
		cmd.SysProcAttr.Unshareflags |= syscall.CLONE_NEWNET
	}
	started := time.Now()
	err = cmd.Start()
	outW.Close()
	errW.Close()
	if err != nil {
		log.abandon()
		outR.Close()
		errR.Close()
		if netReady != nil {
			netReady.Close()
		}
		return nil, fmt.Errorf("start pod process: %w", err)
	}
	if netReady != nil {
		r.connectPod(p, cmd.Process.Pid, netReady)
	}
	proc := &podProcess{cmd: cmd, started: started, exited: make(chan struct{}), log: log, pipes: []*os.File{outR, errR}, stopAux: stopAux}
	log.expect(2)
	proc.copiers.Add(2)
	go func() { defer proc.copiers.Done(); log.copy("stdout", outR) }()
	go func() { defer proc.copiers.Done(); log.copy("stderr", errR) }()
	go func() { waitExited(cmd.Process.Pid); close(proc.exited) }()
	p.mu.Lock()
	p.log, p.waiting = log, ""
	p.mu.Unlock()
	*ok = true
	return proc, nil
}

// connectPod sets up the network of a pod process waiting for it and tells
// it to go on. On failure the pipe closes unwritten: the helper then exits
// with the reason in the pod's log, as a container whose sandbox failed.
func (r *nodeRuntime) connectPod(p *podRun, pid int, ready *os.File) {
	defer ready.Close()
	pn, err := setupPodNet(pid, p.uid)
	if err != nil {
		r.log("dev runtime: network of pod %s/%s: %v", p.namespace, p.name, err)
		return
	}
	p.mu.Lock()
	p.net, p.pid = pn, pid
	p.mu.Unlock()
	_, _ = ready.Write([]byte{1})
}

// newLog creates the pod's log file, where the kubelet keeps it:
// <ns>_<name>_<uid>/<container>.log.
func (r *nodeRuntime) newLog(pod *corev1.Pod) (*criLog, error) {
	dir := filepath.Join(r.logDir, fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	name := "log"
	if len(pod.Spec.Containers) > 0 {
		name = pod.Spec.Containers[0].Name
	}
	return newCRILog(filepath.Join(dir, name+".log"))
}

// containerEnv is the process's environment: a container's defaults, then
// the spec's variables in order, $(VAR) references expanded as Kubernetes
// does.
func (r *nodeRuntime) containerEnv(ctx context.Context, pod *corev1.Pod, c corev1.Container, home string) ([]string, error) {
	path := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	if r.binDir != "" {
		path = r.binDir + ":" + path
	}
	env := []string{"PATH=" + path, "HOSTNAME=" + pod.Name, "HOME=" + home}
	if r.caBundle != "" {
		env = append(env, "SSL_CERT_FILE="+r.caBundle)
	}
	if len(c.EnvFrom) > 0 {
		return nil, &podFailure{Reason: "DevRuntimeUnsupported", Message: "the dev runtime does not support envFrom"}
	}
	defined := map[string]string{}
	for _, e := range c.Env {
		v, err := r.envValue(ctx, pod, e, defined)
		if err != nil {
			return nil, err
		}
		defined[e.Name] = v
		env = setEnv(env, e.Name, v)
	}
	return env, nil
}

func (r *nodeRuntime) envValue(ctx context.Context, pod *corev1.Pod, e corev1.EnvVar, defined map[string]string) (string, error) {
	from := e.ValueFrom
	switch {
	case from == nil:
		return expandEnv(e.Value, func(n string) (string, bool) { v, ok := defined[n]; return v, ok }), nil
	case from.FieldRef != nil:
		v, err := podField(pod, from.FieldRef.FieldPath)
		if err != nil {
			return "", &podFailure{Reason: "CreateContainerConfigError", Message: fmt.Sprintf("env %s: %v", e.Name, err)}
		}
		return v, nil
	case from.ConfigMapKeyRef != nil:
		ref := from.ConfigMapKeyRef
		cm, err := r.client.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, ref.Name, getOpts)
		if err == nil {
			if v, ok := cm.Data[ref.Key]; ok {
				return v, nil
			}
		}
		return optionalRef(e.Name, "configmap", ref.Name, ref.Key, ref.Optional, err)
	case from.SecretKeyRef != nil:
		ref := from.SecretKeyRef
		s, err := r.client.CoreV1().Secrets(pod.Namespace).Get(ctx, ref.Name, getOpts)
		if err == nil {
			if v, ok := s.Data[ref.Key]; ok {
				return string(v), nil
			}
		}
		return optionalRef(e.Name, "secret", ref.Name, ref.Key, ref.Optional, err)
	}
	return "", &podFailure{Reason: "DevRuntimeUnsupported", Message: fmt.Sprintf("env %s: the dev runtime supports value, fieldRef, configMapKeyRef and secretKeyRef", e.Name)}
}

func optionalRef(env, kind, name, key string, optional *bool, err error) (string, error) {
	if err != nil && !apierrors.IsNotFound(err) {
		return "", err
	}
	if optional != nil && *optional {
		return "", nil
	}
	return "", &podFailure{Reason: "CreateContainerConfigError", Message: fmt.Sprintf("env %s: %s %s has no key %q", env, kind, name, key)}
}

// podField resolves the downward-API field paths a container env may use.
func podField(pod *corev1.Pod, path string) (string, error) {
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP", "status.hostIP", "status.podIPs", "status.hostIPs":
		return podIP, nil
	}
	for prefix, m := range map[string]map[string]string{"metadata.labels": pod.Labels, "metadata.annotations": pod.Annotations} {
		if rest, ok := strings.CutPrefix(path, prefix+"['"); ok {
			if key, ok := strings.CutSuffix(rest, "']"); ok {
				return m[key], nil
			}
		}
	}
	return "", fmt.Errorf("field path %q is not supported", path)
}

// expandEnv expands $(VAR) from lookup as Kubernetes does: $$ is a literal
// $, and a reference to an undefined variable stays as written.
func expandEnv(s string, lookup func(string) (string, bool)) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := lookup(name); ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

func envLookup(env []string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		for i := len(env) - 1; i >= 0; i-- {
			if v, ok := strings.CutPrefix(env[i], name+"="); ok {
				return v, true
			}
		}
		return "", false
	}
}

// setEnv sets name in env, replacing an earlier value.
func setEnv(env []string, name, value string) []string {
	for i, kv := range env {
		if strings.HasPrefix(kv, name+"=") {
			env[i] = name + "=" + value
			return env
		}
	}
	return append(env, name+"="+value)
}

// rewritePaths points env values naming a mountPath (or a path below one) at
// the volume's directory, for the mode without a mount namespace.
func rewritePaths(env []string, mounts []bindMount) []string {
	sorted := slices.Clone(mounts)
	slices.SortFunc(sorted, func(a, b bindMount) int { return len(b.Target) - len(a.Target) }) // longest first
	out := make([]string, 0, len(env))
	for _, kv := range env {
		name, v, _ := strings.Cut(kv, "=")
		for _, m := range sorted {
			if v == m.Target || strings.HasPrefix(v, strings.TrimSuffix(m.Target, "/")+"/") {
				v = m.Source + v[len(m.Target):]
				break
			}
		}
		out = append(out, name+"="+v)
	}
	return out
}

// waitExited returns once process pid has exited, without reaping it: the
// exited process stays a zombie, keeping its pid — and so its process
// group's id — from being reused until the caller reaps it (cmd.Wait). The
// runtime kills a pod's group after its main process ended; had the
// process been reaped first, that kill could reach an unrelated group that
// took over the number (pids wrap around at 32,768 on many machines, and a
// chaos run starts tens of thousands of pod processes).
func waitExited(pid int) {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			return
		}
	}
}

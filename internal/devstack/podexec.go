package devstack

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// A pod's process is started through this very binary: the dev runtime runs
// os.Executable() with podExecEnv naming a spec file, and init below turns
// that child into the pod — it bind-mounts the pod's volumes at their
// mountPaths (in the private mount namespace the runtime gave it), drops to
// the pod's user and execs the command. A Go program cannot run code between
// fork and exec, so this re-exec is how the mounts happen in the child only
// (moby's reexec does the same).

// podExecEnv names the spec file of a pod process; nothing else is in the
// helper's environment, so the runtime's own variables never reach a pod.
const podExecEnv = "CRUCIBLE_DEVRUNTIME_POD"

// execSpec is what the helper needs to become the pod.
type execSpec struct {
	// Mounts are bind mounts done in the child's mount namespace; empty in
	// the fallback mode.
	Mounts []bindMount `json:"mounts,omitempty"`
	// Probe only checks that a mount works, then exits 0.
	Probe     string   `json:"probe,omitempty"`
	Dir       string   `json:"dir"`
	Argv      []string `json:"argv"`
	Env       []string `json:"env"`
	SetUser   bool     `json:"setUser"`
	UID       int      `json:"uid"`
	GID       int      `json:"gid"`
	Pdeathsig bool     `json:"pdeathsig"`
	// WaitNetwork: the helper runs in a network namespace of its own that
	// the runtime configures after the start; it waits on fd 3 for one
	// byte saying the pod's network is up (EOF: it failed).
	WaitNetwork bool `json:"waitNetwork,omitempty"`
}

// networkReadyFD is the pipe the runtime signals a pod's network on.
const networkReadyFD = 3

// bindMount is one volume at its mountPath: Source bind-mounted there, or a
// tmpfs of its own for a memory-backed emptyDir.
type bindMount struct {
	Source   string      `json:"source"`
	Target   string      `json:"target"`
	ReadOnly bool        `json:"readOnly"`
	Tmpfs    *tmpfsMount `json:"tmpfs,omitempty"`
}

// tmpfsMount is a memory-backed emptyDir: a tmpfs of SizeBytes (0: the
// kernel's default, half of the machine's memory) owned by the pod's user.
// The kernel enforces the size, as it does for a kubelet's: a write beyond
// it fails with ENOSPC.
type tmpfsMount struct {
	SizeBytes int64 `json:"sizeBytes,omitempty"`
	UID       int   `json:"uid"`
	GID       int   `json:"gid"`
}

// options is the tmpfs's mount data.
func (t tmpfsMount) options() string {
	opts := fmt.Sprintf("mode=0755,uid=%d,gid=%d", t.UID, t.GID)
	if t.SizeBytes > 0 {
		opts += fmt.Sprintf(",size=%d", t.SizeBytes)
	}
	return opts
}

func init() {
	spec := os.Getenv(podExecEnv)
	if spec == "" {
		return
	}
	err := becomePod(spec)
	// Only reached on failure; stderr is the pod's log.
	fmt.Fprintf(os.Stderr, "crucible dev runtime: %v\n", err)
	os.Exit(127)
}

func becomePod(specFile string) error {
	data, err := os.ReadFile(specFile)
	if err != nil {
		return fmt.Errorf("read pod spec: %w", err)
	}
	_ = os.Remove(specFile)
	var spec execSpec
	if err := json.Unmarshal(data, &spec); err != nil {
		return fmt.Errorf("decode pod spec: %w", err)
	}
	if spec.Probe != "" {
		if err := syscall.Mount("crucible-probe", spec.Probe, "tmpfs", 0, ""); err != nil {
			return fmt.Errorf("probe mount: %w", err)
		}
		os.Exit(0)
	}
	if len(spec.Argv) == 0 {
		return errors.New("no command")
	}
	if spec.WaitNetwork {
		if err := awaitNetwork(); err != nil {
			return err
		}
	}
	if err := mountVolumes(spec.Mounts); err != nil {
		return err
	}
	// chdir before dropping privileges: the pod's working directory may sit
	// below directories only root may traverse.
	if err := os.Chdir(spec.Dir); err != nil {
		return fmt.Errorf("working directory: %w", err)
	}
	if spec.SetUser {
		if err := syscall.Setgroups(nil); err != nil {
			return fmt.Errorf("setgroups: %w", err)
		}
		if err := syscall.Setgid(spec.GID); err != nil {
			return fmt.Errorf("setgid: %w", err)
		}
		if err := syscall.Setuid(spec.UID); err != nil {
			return fmt.Errorf("setuid: %w", err)
		}
	}
	// A credential change clears the parent-death signal; set it again.
	if spec.Pdeathsig {
		_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0)
	}
	path, err := lookPath(spec.Argv[0], spec.Env)
	if err != nil {
		return err
	}
	return fmt.Errorf("exec %s: %w", spec.Argv[0], syscall.Exec(path, spec.Argv, spec.Env))
}

// awaitNetwork blocks until the runtime has set the pod's network up, and
// closes the pipe, so the pod's command never inherits it.
func awaitNetwork() error {
	ready := os.NewFile(networkReadyFD, "network-ready")
	defer ready.Close()
	var b [1]byte
	if n, _ := ready.Read(b[:]); n != 1 {
		return errors.New("the runtime could not set up the pod's network (see the runtime's log)")
	}
	return nil
}

// lookPath finds file on the PATH of env, as a container runtime does.
func lookPath(file string, env []string) (string, error) {
	if strings.Contains(file, "/") {
		return file, nil
	}
	pathVar := ""
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "PATH="); ok {
			pathVar = v
		}
	}
	for _, dir := range filepath.SplitList(pathVar) {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, file)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && syscall.Access(p, 1 /* X_OK */) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%q: executable file not found in $PATH", file)
}

// mountVolumes mounts every volume at its target, parents first. A target
// that does not exist is created without touching the host: its deepest
// existing ancestor is covered with a tmpfs into which the ancestor's entries
// are bind-mounted back, and the missing directories are made in that tmpfs.
func mountVolumes(mounts []bindMount) error {
	slices.SortFunc(mounts, func(a, b bindMount) int { return strings.Compare(a.Target, b.Target) })
	var made []string // directories created in a tmpfs of ours
	for _, m := range mounts {
		created, err := mountVolume(m, made)
		if err != nil {
			return err
		}
		made = append(made, created...)
	}
	return nil
}

// mountVolume mounts m and returns the directories it created for it.
func mountVolume(m bindMount, made []string) ([]string, error) {
	if m.Tmpfs != nil {
		created, err := makeMountPoint(m.Target, made)
		if err != nil {
			return nil, err
		}
		flags := uintptr(syscall.MS_NOSUID | syscall.MS_NODEV)
		if m.ReadOnly {
			flags |= syscall.MS_RDONLY
		}
		if err := syscall.Mount("tmpfs", m.Target, "tmpfs", flags, m.Tmpfs.options()); err != nil {
			return nil, fmt.Errorf("tmpfs at %s: %w", m.Target, err)
		}
		return created, nil
	}
	src, err := os.Open(m.Source)
	if err != nil {
		return nil, fmt.Errorf("volume for %s: %w", m.Target, err)
	}
	defer src.Close()
	created, err := makeMountPoint(m.Target, made)
	if err != nil {
		return nil, err
	}
	// Through the open descriptor: the source may lie under a directory
	// just covered by a tmpfs.
	if err := syscall.Mount(fmt.Sprintf("/proc/self/fd/%d", src.Fd()), m.Target, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return nil, fmt.Errorf("bind mount %s: %w", m.Target, err)
	}
	if m.ReadOnly {
		if err := syscall.Mount("", m.Target, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY, ""); err != nil {
			return nil, fmt.Errorf("read-only %s: %w", m.Target, err)
		}
	}
	return created, nil
}

// makeMountPoint makes target an existing directory in this mount namespace
// and returns the directories it created.
func makeMountPoint(target string, made []string) ([]string, error) {
	if !filepath.IsAbs(target) {
		return nil, fmt.Errorf("mountPath %q: not absolute", target)
	}
	if fi, err := os.Stat(target); err == nil {
		if !fi.IsDir() {
			return nil, fmt.Errorf("mountPath %s: exists and is not a directory", target)
		}
		return nil, nil
	}
	anc := filepath.Dir(target)
	for {
		if _, err := os.Stat(anc); err == nil {
			break
		}
		anc = filepath.Dir(anc)
	}
	var created []string
	if !slices.Contains(made, anc) {
		if anc == "/" {
			return nil, fmt.Errorf("mountPath %s: the dev runtime cannot add a directory to /", target)
		}
		if err := shadowDir(anc); err != nil {
			return nil, fmt.Errorf("mountPath %s: %w", target, err)
		}
		created = append(created, anc)
	}
	for d := target; d != anc; d = filepath.Dir(d) {
		created = append(created, d)
	}
	return created, os.MkdirAll(target, 0o755)
}

// shadowDir covers dir with a tmpfs holding the same entries, each bind-mounted
// back from the original, so that new entries can be added to it.
func shadowDir(dir string) error {
	resolved, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return err
	}
	orig, err := os.Open(resolved)
	if err != nil {
		return err
	}
	defer orig.Close()
	fi, err := orig.Stat()
	if err != nil {
		return err
	}
	entries, err := orig.ReadDir(-1)
	if err != nil {
		return err
	}
	if err := syscall.Mount("tmpfs", resolved, "tmpfs", 0, fmt.Sprintf("mode=%o", fi.Mode().Perm())); err != nil {
		return fmt.Errorf("cover %s: %w", resolved, err)
	}
	from := fmt.Sprintf("/proc/self/fd/%d/", orig.Fd())
	for _, e := range entries {
		src, dst := from+e.Name(), filepath.Join(resolved, e.Name())
		switch {
		case e.Type()&os.ModeSymlink != 0:
			link, err := os.Readlink(src)
			if err != nil {
				return err
			}
			if err := os.Symlink(link, dst); err != nil {
				return err
			}
			continue
		case e.IsDir():
			err = os.Mkdir(dst, 0o755)
		default:
			err = os.WriteFile(dst, nil, 0o644)
		}
		if err != nil {
			return err
		}
		if err := syscall.Mount(src, dst, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s back: %w", dst, err)
		}
	}
	return nil
}

package devstack

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Tool versions. hack/build-tools.sh builds exactly these; a test keeps the two
// in step.
const (
	KubernetesVersion = "v1.37.2"
	EtcdVersion       = "v3.6.16"
	KwokVersion       = "v0.8.0"
	// KueueVersion is the Kueue the interop test (make interop) runs; the
	// dev stack itself does not.
	KueueVersion = "v0.17.0"
)

// ErrToolsMissing is returned when a tool binary has not been built.
var ErrToolsMissing = errors.New("tool binary missing")

// Tools locates the binaries built by `make tools`.
type Tools struct {
	// Dir is the cache directory, bin/ in the repository by default.
	Dir string
}

// FindTools returns the tool cache: $CRUCIBLE_TOOLS_DIR if set, else bin/ in
// the nearest parent of the working directory (or of the executable) that holds
// hack/build-tools.sh.
func FindTools() Tools {
	if dir := os.Getenv("CRUCIBLE_TOOLS_DIR"); dir != "" {
		return Tools{Dir: dir}
	}
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		starts = append(starts, filepath.Dir(exe))
	}
	for _, start := range starts {
		for dir := start; ; dir = filepath.Dir(dir) {
			if _, err := os.Stat(filepath.Join(dir, "hack", "build-tools.sh")); err == nil {
				return Tools{Dir: filepath.Join(dir, "bin")}
			}
			if filepath.Dir(dir) == dir {
				break
			}
		}
	}
	return Tools{Dir: "bin"}
}

func (t Tools) KubeAPIServer() string { return t.k8s("kube-apiserver") }
func (t Tools) KubeScheduler() string { return t.k8s("kube-scheduler") }
func (t Tools) KubeControllerManager() string {
	return t.k8s("kube-controller-manager")
}
func (t Tools) Kubectl() string { return t.k8s("kubectl") }
func (t Tools) Etcd() string    { return filepath.Join(t.Dir, "etcd-"+EtcdVersion, "etcd") }
func (t Tools) Kwok() string    { return filepath.Join(t.Dir, "kwok-"+KwokVersion, "kwok") }
func (t Tools) Kueue() string   { return filepath.Join(t.Dir, "kueue-"+KueueVersion, "kueue") }

func (t Tools) k8s(name string) string {
	return filepath.Join(t.Dir, "k8s-"+KubernetesVersion, name)
}

// Check reports every missing binary in one error that says how to build them.
func (t Tools) Check() error {
	var missing []string
	for _, p := range []string{t.Etcd(), t.KubeAPIServer(), t.KubeScheduler(), t.KubeControllerManager(), t.Kwok()} {
		if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %q: run \"make tools\" to build them (or set CRUCIBLE_TOOLS_DIR to where they are)", ErrToolsMissing, missing)
	}
	return nil
}

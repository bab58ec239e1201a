package devstack_test

import (
	"errors"
	"io/fs"
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
)

// A pod's /dev/shm — an emptyDir of medium Memory with a sizeLimit, as a pod
// class asks for one — is a tmpfs of that size in the pod's mount namespace:
// df reports the size, a write beyond it fails, and the host's /dev/shm
// never sees the file.
func TestDevShmHasItsSizeLimit(t *testing.T) {
	s := devstacktest.Shared(t)
	if s.PodIsolation != devstack.IsolationMountNamespace {
		t.Skipf("this machine runs pods with isolation %s: /dev/shm is the host's and no size is enforced", s.PodIsolation)
	}
	spoke := s.Spoke(devstack.DefaultSpokeName)
	limit := resource.MustParse("8Mi")
	pod := testPod("shm", "sh", "-c", `set -- $(df -k /dev/shm | tail -n 1); echo "$2"; `+
		`dd if=/dev/zero of=/dev/shm/fill bs=1M count=9 2>/dev/null && echo fitted || echo full; ls -l /dev/shm/fill >/dev/null && echo written`)
	pod.Spec.Volumes = []corev1.Volume{{Name: "shm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &limit}}}}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "shm", MountPath: "/dev/shm"}}
	createPod(t, spoke, pod)
	done := waitPod(t, spoke.Client, "shm", finished)
	log := podLog(t, spoke, "shm")
	if done.Status.Phase != corev1.PodSucceeded || log != "8192\nfull\nwritten\n" {
		t.Errorf("phase %s, log %q; want Succeeded and %q (an 8 MiB tmpfs that refuses a 9 MiB file, as nobody may write it)", done.Status.Phase, log, "8192\nfull\nwritten\n")
	}
	if _, err := os.Stat("/dev/shm/fill"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the host's /dev/shm has the pod's file (stat: %v)", err)
	}
}

package render

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"crucible.dev/crucible/internal/workpod"
)

func TestTurnWithPushImage(t *testing.T) {
	pods := samplePods()
	pods.PushImage = "ghcr.io/crucible-dev/crucible:1.0"
	got, err := Turn(wharf(), pods, "crucible", check(t, sampleWorkPod()))
	if err != nil {
		t.Fatal(err)
	}
	spec := got.Pod.Spec
	wantInit := []corev1.Container{{
		Name:            "crucible-bin",
		Image:           "ghcr.io/crucible-dev/crucible:1.0",
		Command:         []string{"crucible", "copy-self", "/var/run/crucible/bin"},
		VolumeMounts:    []corev1.VolumeMount{{Name: "crucible-bin", MountPath: "/var/run/crucible/bin"}},
		ImagePullPolicy: corev1.PullIfNotPresent,
		Resources:       pushInitResources(),
		// The init container is held to Pod Security "restricted" too.
		SecurityContext: restricted(),
	}}
	if diff := cmp.Diff(wantInit, spec.InitContainers); diff != "" {
		t.Errorf("init containers (-want +got):\n%s", diff)
	}
	bin := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == "crucible-bin" })
	if bin < 0 || !cmp.Equal(corev1.Volume{Name: "crucible-bin", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}, spec.Volumes[bin]) {
		t.Errorf("volumes %+v: want an emptyDir crucible-bin", spec.Volumes)
	}
	work := spec.Containers[0]
	if !slices.ContainsFunc(work.VolumeMounts, func(m corev1.VolumeMount) bool {
		return cmp.Equal(m, corev1.VolumeMount{Name: "crucible-bin", MountPath: "/var/run/crucible/bin", ReadOnly: true})
	}) {
		t.Errorf("work container mounts %+v: want crucible-bin read-only at /var/run/crucible/bin", work.VolumeMounts)
	}
	wantEnv := []corev1.EnvVar{
		{Name: "CRUCIBLE_BIN_DIR", Value: "/var/run/crucible/bin"},
		{Name: "PATH", Value: "/var/run/crucible/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
	}
	if diff := cmp.Diff(wantEnv, work.Env[len(work.Env)-2:]); diff != "" {
		t.Errorf("env tail (-want +got):\n%s", diff)
	}
}

// A submitted PATH is the submitter's: it is kept, and CRUCIBLE_BIN_DIR
// still says where crucible is.
func TestTurnWithPushImageKeepsSubmittedPath(t *testing.T) {
	pods := samplePods()
	pods.PushImage = "crucible:dev"
	w := sampleWorkPod()
	w.Env = []workpod.EnvVar{{Name: "PATH", Value: "/opt/bin"}}
	got, err := Turn(wharf(), pods, "crucible", check(t, w))
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	binDir := ""
	for _, e := range got.Pod.Spec.Containers[0].Env {
		switch e.Name {
		case "PATH":
			paths = append(paths, e.Value)
		case EnvBinDir:
			binDir = e.Value
		}
	}
	if diff := cmp.Diff([]string{"/opt/bin"}, paths); diff != "" || binDir != BinDir {
		t.Errorf("PATH values (-want +got):\n%s CRUCIBLE_BIN_DIR %q", diff, binDir)
	}
}

func TestTurnWithoutPushImageHasNoInitContainer(t *testing.T) {
	got, err := Turn(wharf(), samplePods(), "crucible", check(t, sampleWorkPod()))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(got.Pod.Spec.InitContainers); n != 0 {
		t.Errorf("%d init containers with push_image unset", n)
	}
	for _, e := range got.Pod.Spec.Containers[0].Env {
		if e.Name == "PATH" || e.Name == EnvBinDir {
			t.Errorf("env %s set with push_image unset", e.Name)
		}
	}
}

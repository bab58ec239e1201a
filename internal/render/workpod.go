package render

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// Where a work pod finds what crucible gives it. Every variable starts with
// workpod.ReservedEnvPrefix, so a submitter cannot shadow one.
const (
	// EnvIngestURL is the drop-box's base URL (the cluster's ingest_url).
	EnvIngestURL = "CRUCIBLE_INGEST_URL"
	// EnvIngestTokenFile names the file holding the pod's ingest token.
	EnvIngestTokenFile = "CRUCIBLE_INGEST_TOKEN_FILE"
	// EnvWorkPod is the work pod's id.
	EnvWorkPod = "CRUCIBLE_WORK_POD"

	IngestTokenDir   = "/var/run/secrets/crucible/ingest" //nolint:gosec // G101: a mount path, not a credential
	IngestTokenPath  = IngestTokenDir + "/token"          //nolint:gosec // G101: a mount path, not a credential
	FilesMountPath   = "/etc/crucible/files"
	SecretsMountPath = "/etc/crucible/secrets" //nolint:gosec // G101: a mount path, not a credential
)

// The push binary: with [pods] push_image set, an init container copies the
// crucible binary from crucible's image into an emptyDir that the work
// container sees at BinDir, so `crucible push` works in any image.
const (
	// EnvBinDir names the directory holding the copied crucible binary.
	EnvBinDir = "CRUCIBLE_BIN_DIR"
	BinDir    = "/var/run/crucible/bin"
	// PushInitContainerName is the init container that copies the binary.
	PushInitContainerName = "crucible-bin"
	volumeBin             = "crucible-bin"
	// binPath is the work container's PATH: a pod spec cannot extend the
	// image's own PATH, so the conventional one follows BinDir.
	binPath = BinDir + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// addPushBinary adds the init container, its volume, and BinDir on the work
// container's PATH unless the submitter set PATH (then $CRUCIBLE_BIN_DIR
// says where crucible is).
func addPushBinary(spec *corev1.PodSpec, image string, pull corev1.PullPolicy) {
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: volumeBin, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	spec.InitContainers = append(spec.InitContainers, corev1.Container{
		Name:            PushInitContainerName,
		Image:           image,
		Command:         []string{"crucible", "copy-self", BinDir},
		VolumeMounts:    []corev1.VolumeMount{{Name: volumeBin, MountPath: BinDir}},
		ImagePullPolicy: pull,
		Resources:       pushInitResources(),
	})
	work := &spec.Containers[0]
	work.VolumeMounts = append(work.VolumeMounts, corev1.VolumeMount{Name: volumeBin, MountPath: BinDir, ReadOnly: true})
	work.Env = append(work.Env, corev1.EnvVar{Name: EnvBinDir, Value: BinDir})
	if !slices.ContainsFunc(work.Env, func(e corev1.EnvVar) bool { return e.Name == "PATH" }) {
		work.Env = append(work.Env, corev1.EnvVar{Name: "PATH", Value: binPath})
	}
}

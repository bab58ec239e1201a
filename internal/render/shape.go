package render

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"crucible.dev/crucible/internal/workpod"
)

// ShmMountPath is where a class's memory-backed /dev/shm is mounted.
const ShmMountPath = "/dev/shm"

const volumeShm = "dshm"

// pushInitResources bound the init container that copies crucible into the
// pod: a single file copy. Set so that namespaces with a LimitRange or a
// ResourceQuota that demands them admit the pod.
func pushInitResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
	}
}

// applyShape gives the pod what its class asks of the spoke: the work
// container's resources, placement, deadline, /dev/shm, and for every
// container (the push init container too) a securityContext that passes
// Pod Security "restricted". It runs last, so no container escapes it.
func applyShape(spec *corev1.PodSpec, s workpod.Shape) {
	spec.Tolerations = s.Tolerations
	spec.NodeSelector = s.NodeSelector
	spec.Affinity = s.Affinity
	spec.PriorityClassName = s.PriorityClassName
	if s.RuntimeClassName != "" {
		spec.RuntimeClassName = ptr.To(s.RuntimeClassName)
	}
	spec.ActiveDeadlineSeconds = ptr.To(s.DeadlineSeconds)
	spec.SecurityContext = &corev1.PodSecurityContext{
		RunAsNonRoot:   ptr.To(true),
		RunAsUser:      ptr.To(s.RunAsUser),
		RunAsGroup:     ptr.To(s.RunAsGroup),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	work := &spec.Containers[0]
	work.Resources = s.Resources
	if s.Shm != nil {
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: volumeShm, VolumeSource: corev1.VolumeSource{
			EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: s.Shm},
		}})
		work.VolumeMounts = append(work.VolumeMounts, corev1.VolumeMount{Name: volumeShm, MountPath: ShmMountPath})
	}
	for i := range spec.InitContainers {
		spec.InitContainers[i].SecurityContext = restrictedContainer()
	}
	for i := range spec.Containers {
		spec.Containers[i].SecurityContext = restrictedContainer()
	}
}

// restrictedContainer is what Pod Security "restricted" asks of each
// container beyond the pod's own context: no privilege escalation, no
// capabilities.
func restrictedContainer() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}

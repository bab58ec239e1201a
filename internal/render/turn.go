package render

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"crucible.dev/crucible/internal/fleet"
)

// ErrInvalidWorkPod is wrapped by Turn's error when the work pod does not
// validate; the API answers 400 with WorkPod.Validate's field errors.
var ErrInvalidWorkPod = errors.New("invalid work pod")

// Names of the work container and of the pod's volumes.
const (
	ContainerName     = "work"
	volumeIngestToken = "ingest-token"
	volumeFiles       = "files"
	volumeSecrets     = "secrets"
	ingestTokenFile   = "token"
)

// Objects are one work pod's objects on a spoke. Create the Pod first, then
// the ConfigMap and Secret owned by it (Own), so the spoke's garbage
// collector removes them with the pod; the kubelet waits for the mounts.
type Objects struct {
	Pod *corev1.Pod
	// ConfigMap holds WorkPod.Files; nil when there are none.
	ConfigMap *corev1.ConfigMap
	// Secret holds WorkPod.SecretFiles; nil when there are none.
	Secret *corev1.Secret
}

// List returns the objects that exist, Pod first (creation order).
func (o Objects) List() []runtime.Object {
	list := []runtime.Object{o.Pod}
	if o.ConfigMap != nil {
		list = append(list, o.ConfigMap)
	}
	if o.Secret != nil {
		list = append(list, o.Secret)
	}
	return list
}

// Labels are the origin labels of every object of work pod w.
func Labels(instance string, w WorkPod) map[string]string {
	return map[string]string{
		LabelManagedBy: ManagedByValue,
		LabelInstance:  instance,
		LabelWorkPod:   w.ID,
		LabelKind:      w.Kind,
	}
}

// Turn renders work pod w for cluster c (R-C3): a pod in the loop namespace
// running as the turn service account without the API token, with the
// ingest URL, an ingest token projected for the ingest audience, and the
// files ConfigMap and Secret when there are files. It validates w first.
func Turn(c fleet.ClusterEntry, pods fleet.Pods, instance string, w WorkPod) (Objects, error) {
	if errs := w.Validate(); len(errs) > 0 {
		return Objects{}, fmt.Errorf("%w: %w", ErrInvalidWorkPod, errs.ToAggregate())
	}
	if instance == "" || len(validation.IsValidLabelValue(instance)) > 0 {
		return Objects{}, fmt.Errorf("instance %q: must be a non-empty label value", instance)
	}
	expiration := pods.IngestTokenExpiration.Duration
	if expiration == 0 {
		expiration = fleet.DefaultIngestTokenExpiration
	}

	labels := Labels(instance, w)
	env := make([]corev1.EnvVar, 0, len(w.Env)+3)
	for _, e := range w.Env {
		env = append(env, corev1.EnvVar{Name: e.Name, Value: e.Value})
	}
	env = append(env,
		corev1.EnvVar{Name: EnvIngestURL, Value: c.IngestURL},
		corev1.EnvVar{Name: EnvIngestTokenFile, Value: IngestTokenPath},
		corev1.EnvVar{Name: EnvWorkPod, Value: w.ID},
	)
	volumes := []corev1.Volume{{
		Name: volumeIngestToken,
		VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
				Audience:          c.IngestAudience,
				ExpirationSeconds: ptr.To(int64(expiration.Seconds())),
				Path:              ingestTokenFile,
			}}},
		}},
	}}
	mounts := []corev1.VolumeMount{{Name: volumeIngestToken, MountPath: IngestTokenDir, ReadOnly: true}}

	var objs Objects
	if len(w.Files) > 0 {
		objs.ConfigMap = &corev1.ConfigMap{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: objectMeta(FilesName(w.ID), c.LoopNamespace, labels),
			// Immutable: the kubelet need not watch it.
			Immutable: ptr.To(true),
			Data:      maps.Clone(w.Files),
		}
		volumes = append(volumes, corev1.Volume{Name: volumeFiles, VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: FilesName(w.ID)}},
		}})
		mounts = append(mounts, corev1.VolumeMount{Name: volumeFiles, MountPath: FilesMountPath, ReadOnly: true})
	}
	if len(w.SecretFiles) > 0 {
		data := make(map[string][]byte, len(w.SecretFiles))
		for k, v := range w.SecretFiles {
			data[k] = []byte(v)
		}
		objs.Secret = &corev1.Secret{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: objectMeta(SecretsName(w.ID), c.LoopNamespace, labels),
			Immutable:  ptr.To(true),
			Type:       corev1.SecretTypeOpaque,
			Data:       data,
		}
		volumes = append(volumes, corev1.Volume{Name: volumeSecrets, VolumeSource: corev1.VolumeSource{
			Secret: &corev1.SecretVolumeSource{SecretName: SecretsName(w.ID)},
		}})
		mounts = append(mounts, corev1.VolumeMount{Name: volumeSecrets, MountPath: SecretsMountPath, ReadOnly: true})
	}

	meta := objectMeta(w.ID, c.LoopNamespace, labels)
	if len(w.Annotations) > 0 {
		meta.Annotations = maps.Clone(w.Annotations)
	}
	var nodeSelector map[string]string
	if len(pods.NodeSelector) > 0 {
		nodeSelector = maps.Clone(pods.NodeSelector)
	}
	objs.Pod = &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: meta,
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			ServiceAccountName:           c.TurnServiceAccount,
			AutomountServiceAccountToken: ptr.To(false),
			NodeSelector:                 nodeSelector,
			Containers: []corev1.Container{{
				Name:            ContainerName,
				Image:           w.Image,
				Command:         slices.Clone(w.Command),
				Args:            slices.Clone(w.Args),
				Env:             env,
				VolumeMounts:    mounts,
				ImagePullPolicy: corev1.PullPolicy(pods.ImagePullPolicy),
			}},
			Volumes: volumes,
		},
	}
	if pods.PushImage != "" {
		addPushBinary(&objs.Pod.Spec, pods.PushImage, corev1.PullPolicy(pods.ImagePullPolicy))
	}
	return objs, nil
}

// FilesName is the name of a work pod's files ConfigMap.
func FilesName(id string) string { return id + "-files" }

// SecretsName is the name of a work pod's Secret.
func SecretsName(id string) string { return id + "-secrets" }

func objectMeta(name, namespace string, labels map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: maps.Clone(labels)}
}

// Own makes pod the owner of obj, so the spoke's garbage collector deletes
// obj with the pod. The controller may only create and delete ConfigMaps and
// Secrets (no patch), so ownership is set before they are created, from the
// created pod (its uid). blockOwnerDeletion stays unset: setting it needs
// update on pods/finalizers, which R-ID4 does not grant. Owning twice is a
// no-op.
func Own(obj metav1.Object, pod *corev1.Pod) {
	refs := obj.GetOwnerReferences()
	for _, r := range refs {
		if r.UID == pod.UID && r.Kind == "Pod" {
			return
		}
	}
	obj.SetOwnerReferences(append(refs, metav1.OwnerReference{
		APIVersion: "v1",
		Kind:       "Pod",
		Name:       pod.Name,
		UID:        pod.UID,
	}))
}

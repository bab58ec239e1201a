package render

import (
	"errors"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/workpod"
)

// errUnchecked is Turn's error for the zero workpod.Valid: a work pod that
// never went through workpod.Check.
var errUnchecked = errors.New("work pod was never checked (the zero workpod.Valid)")

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

// Turn renders work pod v for cluster c (R-C3): a pod in the loop namespace
// running as the turn service account without the API token, with the
// ingest URL, an ingest token projected for the ingest audience, and the
// files ConfigMap and Secret when there are files, shaped by its class
// (resources, placement, deadline, /dev/shm, a restricted securityContext
// on every container). v was validated by
// workpod.Check, so Turn does not validate it again; pods comes defaulted
// from profile.Parse, so a zero token lifetime is a caller's mistake, refused.
func Turn(c profile.ClusterEntry, pods profile.Pods, instance string, v workpod.Valid) (Objects, error) {
	if v.IsZero() {
		return Objects{}, errUnchecked
	}
	if instance == "" || len(validation.IsValidLabelValue(instance)) > 0 {
		return Objects{}, fmt.Errorf("instance %q: must be a non-empty label value", instance)
	}
	expiration := pods.IngestTokenExpiration.Duration
	if expiration <= 0 {
		return Objects{}, fmt.Errorf("pods.ingest_token_expiration %s: must be positive (profile.Parse sets its default)", expiration)
	}
	w := v.Pod() // a copy: the objects share nothing with v
	labels := workpod.Labels(instance, w)
	ns := c.LoopNamespace
	vols := []corev1.Volume{ingestTokenVolume(c.IngestAudience, expiration)}
	mounts := []corev1.VolumeMount{{Name: volumeIngestToken, MountPath: IngestTokenDir, ReadOnly: true}}

	var objs Objects
	if len(w.Files) > 0 {
		objs.ConfigMap = filesConfigMap(w, ns, labels)
		vols = append(vols, corev1.Volume{Name: volumeFiles, VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: FilesName(w.ID)}},
		}})
		mounts = append(mounts, corev1.VolumeMount{Name: volumeFiles, MountPath: FilesMountPath, ReadOnly: true})
	}
	if len(w.SecretFiles) > 0 {
		objs.Secret = secretFilesSecret(w, ns, labels)
		vols = append(vols, corev1.Volume{Name: volumeSecrets, VolumeSource: corev1.VolumeSource{
			Secret: &corev1.SecretVolumeSource{SecretName: SecretsName(w.ID)},
		}})
		mounts = append(mounts, corev1.VolumeMount{Name: volumeSecrets, MountPath: SecretsMountPath, ReadOnly: true})
	}
	objs.Pod = workPod(c, pods, w, labels, vols, mounts)
	if pods.PushImage != "" {
		addPushBinary(&objs.Pod.Spec, pods.PushImage, corev1.PullPolicy(pods.ImagePullPolicy))
	}
	applyShape(&objs.Pod.Spec, w.Shape)
	return objs, nil
}

// workPod is the Pod of w: one work container with w's image, command and
// environment and crucible's own variables after it, never restarted.
func workPod(c profile.ClusterEntry, pods profile.Pods, w workpod.WorkPod, labels map[string]string,
	vols []corev1.Volume, mounts []corev1.VolumeMount) *corev1.Pod {
	meta := objectMeta(w.ID, c.LoopNamespace, labels)
	if len(w.Annotations) > 0 {
		meta.Annotations = w.Annotations
	}
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: meta,
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			ServiceAccountName:           c.TurnServiceAccount,
			AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{
				Name:            ContainerName,
				Image:           w.Image,
				Command:         w.Command,
				Args:            w.Args,
				Env:             workEnv(c, w),
				VolumeMounts:    mounts,
				ImagePullPolicy: corev1.PullPolicy(pods.ImagePullPolicy),
			}},
			Volumes: vols,
		},
	}
}

// workEnv is w's variables, then where the pod finds the drop-box, its
// ingest token and its own id.
func workEnv(c profile.ClusterEntry, w workpod.WorkPod) []corev1.EnvVar {
	env := make([]corev1.EnvVar, 0, len(w.Env)+3)
	for _, e := range w.Env {
		env = append(env, corev1.EnvVar{Name: e.Name, Value: e.Value})
	}
	return append(env,
		corev1.EnvVar{Name: EnvIngestURL, Value: c.IngestURL},
		corev1.EnvVar{Name: EnvIngestTokenFile, Value: IngestTokenPath},
		corev1.EnvVar{Name: EnvWorkPod, Value: w.ID},
	)
}

// ingestTokenVolume projects the pod's own token for the drop-box's audience.
func ingestTokenVolume(audience string, expiration time.Duration) corev1.Volume {
	return corev1.Volume{
		Name: volumeIngestToken,
		VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
				Audience:          audience,
				ExpirationSeconds: ptr.To(int64(expiration.Seconds())),
				Path:              ingestTokenFile,
			}}},
		}},
	}
}

// filesConfigMap holds w's files. Immutable: the kubelet need not watch it.
func filesConfigMap(w workpod.WorkPod, namespace string, labels map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: objectMeta(FilesName(w.ID), namespace, labels),
		Immutable:  ptr.To(true),
		Data:       w.Files,
	}
}

// secretFilesSecret holds w's secret files, immutable like the ConfigMap.
func secretFilesSecret(w workpod.WorkPod, namespace string, labels map[string]string) *corev1.Secret {
	data := make(map[string][]byte, len(w.SecretFiles))
	for k, v := range w.SecretFiles {
		data[k] = []byte(v)
	}
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: objectMeta(SecretsName(w.ID), namespace, labels),
		Immutable:  ptr.To(true),
		Type:       corev1.SecretTypeOpaque,
		Data:       data,
	}
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

package render

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/workpod"
)

func wharf() profile.ClusterEntry {
	return profile.ClusterEntry{
		Name:               "wharf",
		Server:             "https://api.wharf.example.com:6443",
		CAFile:             "/etc/crucible/wharf/ca.crt",
		TokenFile:          "/var/run/secrets/crucible/wharf/token",
		LoopNamespace:      "loops",
		TurnServiceAccount: "crucible-turn",
		IngestURL:          "https://crucible-ext.hub.example.com",
		IngestAudience:     "crucible-ingest",
		QPS:                100,
		Burst:              200,
	}
}

func samplePods() profile.Pods {
	return profile.Pods{
		IngestTokenExpiration: profile.Duration{Duration: 2 * time.Hour},
		NodeSelector:          map[string]string{"nvidia.com/gpu.present": "true"},
		ImagePullPolicy:       "IfNotPresent",
	}
}

// defaultedPods is [pods] as profile.Parse leaves an empty table.
func defaultedPods() profile.Pods {
	return profile.Pods{IngestTokenExpiration: profile.Duration{Duration: profile.DefaultIngestTokenExpiration}}
}

// check is w as workpod.Check accepts it, shaped as the default class when
// it has no shape; the test fails if Check refuses it.
func check(t testing.TB, w workpod.WorkPod) workpod.Valid {
	t.Helper()
	if w.Shape.Class == "" {
		w.Shape = standardShape()
	}
	v, errs := workpod.Check(w)
	if len(errs) > 0 {
		t.Fatalf("workpod.Check: %v", errs)
	}
	return v
}

func sampleWorkPod() workpod.WorkPod {
	return workpod.WorkPod{
		ID:          "turn-1",
		Kind:        "turn",
		Image:       "ghcr.io/example/agent:1.2",
		Command:     []string{"agent"},
		Args:        []string{"--once", "--verbose"},
		Env:         []workpod.EnvVar{{Name: "MODEL", Value: "m1"}, {Name: "A_B", Value: ""}},
		Files:       map[string]string{"prompt.md": "# hi\n", "config.json": "{}"},
		SecretFiles: map[string]string{"api-key": "s3cret\x00\xff"},
		Annotations: map[string]string{"pod-complete.stage.kwok.x-k8s.io/delay": "1s"},
		Shape:       gpuShape(),
	}
}

// standardShape is what podclass.Resolve makes of the default class.
func standardShape() workpod.Shape {
	return workpod.Shape{
		Class: "standard", DeadlineSeconds: 6 * 3600, RunAsUser: 65532, RunAsGroup: 65532,
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{"cpu": resource.MustParse("500m"), "memory": resource.MustParse("1Gi")},
			Limits:   corev1.ResourceList{"memory": resource.MustParse("1Gi")},
		},
	}
}

// gpuShape asks for everything a class can give.
func gpuShape() workpod.Shape {
	return workpod.Shape{
		Class: "gpu", DeadlineSeconds: 3600, RunAsUser: 1000, RunAsGroup: 2000,
		Resources:         gpuResources(),
		Tolerations:       []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		NodeSelector:      map[string]string{"nvidia.com/gpu.present": "true"},
		Affinity:          gpuAffinity(),
		PriorityClassName: "gpu-batch", RuntimeClassName: "nvidia",
		Shm: ptr.To(resource.MustParse("1Gi")),
	}
}

func gpuResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{"cpu": resource.MustParse("2"), "memory": resource.MustParse("8Gi"), "nvidia.com/gpu": resource.MustParse("1")},
		Limits:   corev1.ResourceList{"memory": resource.MustParse("8Gi"), "nvidia.com/gpu": resource.MustParse("1")},
	}
}

func gpuAffinity() *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
			{Key: "nvidia.com/gpu.memory", Operator: corev1.NodeSelectorOpGt, Values: []string{"40000"}},
		}}},
	}}}
}

// restricted is the securityContext of every rendered container.
func restricted() *corev1.SecurityContext {
	return &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
}

func sampleLabels() map[string]string {
	return map[string]string{
		"app.kubernetes.io/managed-by": "crucible",
		"crucible.dev/instance":        "crucible",
		"crucible.dev/work-pod":        "turn-1",
		"crucible.dev/kind":            "turn",
	}
}

func TestTurnSample(t *testing.T) {
	got, err := Turn(wharf(), samplePods(), "crucible", check(t, sampleWorkPod()))
	if err != nil {
		t.Fatal(err)
	}
	want := Objects{
		Pod: &corev1.Pod{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{
				Name:        "turn-1",
				Namespace:   "loops",
				Labels:      sampleLabels(),
				Annotations: map[string]string{"pod-complete.stage.kwok.x-k8s.io/delay": "1s"},
			},
			Spec: corev1.PodSpec{
				RestartPolicy:                corev1.RestartPolicyNever,
				ServiceAccountName:           "crucible-turn",
				AutomountServiceAccountToken: ptr.To(false),
				NodeSelector:                 map[string]string{"nvidia.com/gpu.present": "true"},
				Tolerations:                  []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
				Affinity:                     gpuAffinity(),
				PriorityClassName:            "gpu-batch",
				RuntimeClassName:             ptr.To("nvidia"),
				ActiveDeadlineSeconds:        ptr.To[int64](3600),
				SecurityContext: &corev1.PodSecurityContext{
					RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](2000),
					SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
				Containers: []corev1.Container{{
					Name:    "work",
					Image:   "ghcr.io/example/agent:1.2",
					Command: []string{"agent"},
					Args:    []string{"--once", "--verbose"},
					Env: []corev1.EnvVar{
						{Name: "MODEL", Value: "m1"},
						{Name: "A_B", Value: ""},
						{Name: "CRUCIBLE_INGEST_URL", Value: "https://crucible-ext.hub.example.com"},
						{Name: "CRUCIBLE_INGEST_TOKEN_FILE", Value: "/var/run/secrets/crucible/ingest/token"},
						{Name: "CRUCIBLE_WORK_POD", Value: "turn-1"},
					},
					VolumeMounts: []corev1.VolumeMount{
						{Name: "ingest-token", MountPath: "/var/run/secrets/crucible/ingest", ReadOnly: true},
						{Name: "files", MountPath: "/etc/crucible/files", ReadOnly: true},
						{Name: "secrets", MountPath: "/etc/crucible/secrets", ReadOnly: true},
						{Name: "dshm", MountPath: "/dev/shm"},
					},
					ImagePullPolicy: corev1.PullIfNotPresent,
					Resources:       gpuResources(),
					SecurityContext: restricted(),
				}},
				Volumes: []corev1.Volume{
					{Name: "ingest-token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
						Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
							Audience:          "crucible-ingest",
							ExpirationSeconds: ptr.To[int64](7200),
							Path:              "token",
						}}},
					}}},
					{Name: "files", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
						LocalObjectReference: corev1.LocalObjectReference{Name: "turn-1-files"},
					}}},
					{Name: "secrets", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
						SecretName: "turn-1-secrets",
					}}},
					{Name: "dshm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
						Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(resource.MustParse("1Gi")),
					}}},
				},
			},
		},
		ConfigMap: &corev1.ConfigMap{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Name: "turn-1-files", Namespace: "loops", Labels: sampleLabels()},
			Immutable:  ptr.To(true),
			Data:       map[string]string{"prompt.md": "# hi\n", "config.json": "{}"},
		},
		Secret: &corev1.Secret{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{Name: "turn-1-secrets", Namespace: "loops", Labels: sampleLabels()},
			Immutable:  ptr.To(true),
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{"api-key": []byte("s3cret\x00\xff")},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Turn (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"Pod", "ConfigMap", "Secret"}, kinds(got)); diff != "" {
		t.Errorf("List() kinds (-want +got):\n%s", diff)
	}
}

func kinds(o Objects) []string {
	var ks []string
	for _, obj := range o.List() {
		ks = append(ks, obj.GetObjectKind().GroupVersionKind().Kind)
	}
	return ks
}

func TestTurnWithoutFiles(t *testing.T) {
	w := workpod.WorkPod{ID: "loop-7", Kind: "loop", Image: "busybox"}
	got, err := Turn(wharf(), defaultedPods(), "crucible-b", check(t, w))
	if err != nil {
		t.Fatal(err)
	}
	if got.ConfigMap != nil || got.Secret != nil {
		t.Errorf("ConfigMap = %v, Secret = %v; want both nil without files", got.ConfigMap, got.Secret)
	}
	if diff := cmp.Diff([]string{"Pod"}, kinds(got)); diff != "" {
		t.Errorf("List() kinds (-want +got):\n%s", diff)
	}
	spec := got.Pod.Spec
	wantVolumes := []corev1.Volume{{Name: "ingest-token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
			Audience: "crucible-ingest", ExpirationSeconds: ptr.To[int64](3600), Path: "token",
		}}},
	}}}}
	if diff := cmp.Diff(wantVolumes, spec.Volumes); diff != "" {
		t.Errorf("volumes (-want +got):\n%s", diff)
	}
	c := spec.Containers[0]
	if diff := cmp.Diff([]corev1.VolumeMount{{Name: "ingest-token", MountPath: IngestTokenDir, ReadOnly: true}}, c.VolumeMounts); diff != "" {
		t.Errorf("mounts (-want +got):\n%s", diff)
	}
	if c.Command != nil || c.Args != nil || c.ImagePullPolicy != "" || spec.NodeSelector != nil || got.Pod.Annotations != nil {
		t.Errorf("unset fields were set: command %v args %v pull %q nodeSelector %v annotations %v",
			c.Command, c.Args, c.ImagePullPolicy, spec.NodeSelector, got.Pod.Annotations)
	}
	wantLabels := map[string]string{
		workpod.LabelManagedBy: "crucible", workpod.LabelInstance: "crucible-b", workpod.LabelWorkPod: "loop-7", workpod.LabelKind: "loop",
	}
	if diff := cmp.Diff(wantLabels, got.Pod.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
}

// Turn's objects share no map or slice with its inputs: changing them
// changes neither the checked pod, nor the profile's [pods], nor each other.
func TestTurnCopiesItsInputs(t *testing.T) {
	pods := samplePods()
	v := check(t, sampleWorkPod())
	got, err := Turn(wharf(), pods, "crucible", v)
	if err != nil {
		t.Fatal(err)
	}
	work := &got.Pod.Spec.Containers[0]
	got.ConfigMap.Data["prompt.md"] = "changed"
	work.Command[0], work.Args[0] = "changed", "changed"
	got.Pod.Annotations["x"] = "y"
	got.Pod.Spec.NodeSelector["x"] = "y"
	got.Pod.Labels["mutated"] = "yes"
	if diff := cmp.Diff(sampleWorkPod(), v.Pod()); diff != "" {
		t.Errorf("the checked pod changed with Turn's objects (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(samplePods(), pods); diff != "" {
		t.Errorf("[pods] changed with Turn's objects (-want +got):\n%s", diff)
	}
	if _, shared := got.ConfigMap.Labels["mutated"]; shared {
		t.Error("the pod and the ConfigMap share one labels map")
	}
}

func TestTurnErrors(t *testing.T) {
	valid := check(t, workpod.WorkPod{ID: "t", Kind: "turn", Image: "x"})
	tests := []struct {
		name     string
		pods     profile.Pods
		instance string
		w        workpod.Valid
		want     string
	}{
		{
			name: "a work pod nobody checked", pods: defaultedPods(), instance: "crucible", w: workpod.Valid{},
			want: "work pod was never checked (the zero workpod.Valid)",
		},
		{
			name: "empty instance", pods: defaultedPods(), instance: "", w: valid,
			want: `instance "": must be a non-empty label value`,
		},
		{
			name: "instance not a label value", pods: defaultedPods(), instance: "a b", w: valid,
			want: `instance "a b": must be a non-empty label value`,
		},
		{
			name: "pods not defaulted", pods: profile.Pods{}, instance: "crucible", w: valid,
			want: "pods.ingest_token_expiration 0s: must be positive (profile.Parse sets its default)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Turn(wharf(), tt.pods, tt.instance, tt.w)
			if got.Pod != nil {
				t.Error("Turn returned a pod with an error")
			}
			if err == nil {
				t.Fatal("Turn succeeded")
			}
			if diff := cmp.Diff(tt.want, err.Error()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// Every variable crucible sets carries the prefix Check reserves, so no
// submitted variable can shadow one.
func TestTurnEnvIsReserved(t *testing.T) {
	pods := samplePods()
	pods.PushImage = "crucible:dev"
	w := sampleWorkPod()
	w.Env = nil
	got, err := Turn(wharf(), pods, "crucible", check(t, w))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range got.Pod.Spec.Containers[0].Env {
		if e.Name != "PATH" && !strings.HasPrefix(e.Name, workpod.ReservedEnvPrefix) {
			t.Errorf("crucible sets %s, outside the reserved %s prefix", e.Name, workpod.ReservedEnvPrefix)
		}
	}
}

func TestOwn(t *testing.T) {
	objs, err := Turn(wharf(), defaultedPods(), "crucible", check(t, sampleWorkPod()))
	if err != nil {
		t.Fatal(err)
	}
	created := objs.Pod.DeepCopy()
	created.UID = types.UID("6f1e0c1a-0000-4000-8000-000000000001")

	other := metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: "turn-0", UID: "other"}
	objs.Secret.OwnerReferences = []metav1.OwnerReference{other}
	Own(objs.ConfigMap, created)
	Own(objs.ConfigMap, created) // idempotent
	Own(objs.Secret, created)

	ref := metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: "turn-1", UID: "6f1e0c1a-0000-4000-8000-000000000001"}
	if diff := cmp.Diff([]metav1.OwnerReference{ref}, objs.ConfigMap.OwnerReferences); diff != "" {
		t.Errorf("ConfigMap owners (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]metav1.OwnerReference{other, ref}, objs.Secret.OwnerReferences); diff != "" {
		t.Errorf("Secret owners (-want +got):\n%s", diff)
	}
}

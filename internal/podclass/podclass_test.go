package podclass

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/workpod"
)

func q(s string) profile.Quantity { return profile.Quantity{Quantity: resource.MustParse(s)} }

// gpuClass is the dev stack's gpu class: 1 GPU unless asked for 1–8, memory
// up to 64Gi, 6 h deadlines up to 24 h.
func gpuClass() profile.PodClass {
	return profile.PodClass{
		Name: "gpu", GPUs: 1, GPUResource: "nvidia.com/gpu",
		Requests:     map[string]profile.Quantity{"cpu": q("2"), "memory": q("8Gi")},
		Limits:       map[string]profile.Quantity{"memory": q("8Gi")},
		Tolerations:  []profile.Toleration{{Key: "nvidia.com/gpu", Operator: "Exists", Effect: "NoSchedule"}},
		NodeSelector: map[string]string{"nvidia.com/gpu.present": "true"},
		NodeAffinity: []profile.NodeRequirement{{Key: "nvidia.com/gpu.memory", Operator: "Gt", Values: []string{"40000"}}},
		Shm:          q("1Gi"), Deadline: profile.Duration{Duration: 6 * time.Hour}, MaxDeadline: profile.Duration{Duration: 24 * time.Hour},
		RunAsUser: 65532, RunAsGroup: 65532, RuntimeClass: "nvidia", PriorityClass: "gpu-batch",
		Allow: profile.ClassAllow{GPUs: profile.IntRange{Min: 1, Max: 8}, Resources: map[string]profile.QuantityRange{"memory": {Min: q("1Gi"), Max: q("64Gi")}}},
	}
}

func TestResolveTheClassAsWritten(t *testing.T) {
	got, errs := Resolve(gpuClass(), map[string]string{"region": "eu", "nvidia.com/gpu.present": "false"}, Ask{})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	want := workpod.Shape{
		Class: "gpu",
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{"cpu": resource.MustParse("2"), "memory": resource.MustParse("8Gi"), "nvidia.com/gpu": resource.MustParse("1")},
			Limits:   corev1.ResourceList{"memory": resource.MustParse("8Gi"), "nvidia.com/gpu": resource.MustParse("1")},
		},
		Tolerations: []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		// The class's labels win over the profile's.
		NodeSelector: map[string]string{"region": "eu", "nvidia.com/gpu.present": "true"},
		Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
				{Key: "nvidia.com/gpu.memory", Operator: corev1.NodeSelectorOpGt, Values: []string{"40000"}},
			}}},
		}}},
		PriorityClassName: "gpu-batch", RuntimeClassName: "nvidia",
		DeadlineSeconds: 6 * 3600, Shm: ptr.To(resource.MustParse("1Gi")), RunAsUser: 65532, RunAsGroup: 65532,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestResolveAsks(t *testing.T) {
	gpu := gpuClass()
	standard := profile.PodClass{Name: "standard", GPUResource: "nvidia.com/gpu",
		Requests: map[string]profile.Quantity{"cpu": q("500m"), "memory": q("1Gi")},
		Deadline: profile.Duration{Duration: time.Hour}, MaxDeadline: profile.Duration{Duration: 2 * time.Hour}, RunAsUser: 1}
	type want struct {
		gpus, memoryRequest, memoryLimit string
		deadline                         int64
	}
	ok := []struct {
		name  string
		class profile.PodClass
		ask   Ask
		want  want
	}{
		{"more gpus", gpu, Ask{GPUs: ptr.To(8)}, want{"8", "8Gi", "8Gi", 6 * 3600}},
		{"the fewest gpus", gpu, Ask{GPUs: ptr.To(1)}, want{"1", "8Gi", "8Gi", 6 * 3600}},
		{"more memory moves the limit too", gpu, Ask{Resources: map[string]string{"memory": "64Gi"}}, want{"1", "64Gi", "64Gi", 6 * 3600}},
		{"less memory", gpu, Ask{Resources: map[string]string{"memory": "1Gi"}}, want{"1", "1Gi", "1Gi", 6 * 3600}},
		{"a longer deadline", gpu, Ask{Deadline: "24h"}, want{"1", "8Gi", "8Gi", 24 * 3600}},
		{"a shorter deadline on a class without allow", standard, Ask{Deadline: "5s"}, want{"", "1Gi", "", 5}},
	}
	for _, tc := range ok {
		t.Run(tc.name, func(t *testing.T) {
			s, errs := Resolve(tc.class, nil, tc.ask)
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			r := s.Resources
			got := want{quantity(r.Limits, "nvidia.com/gpu"), quantity(r.Requests, "memory"), quantity(r.Limits, "memory"), s.DeadlineSeconds}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
			if quantity(r.Requests, "nvidia.com/gpu") != tc.want.gpus {
				t.Errorf("gpu request %s != limit %s: the device plugin needs both equal", quantity(r.Requests, "nvidia.com/gpu"), tc.want.gpus)
			}
		})
	}

	refused := []struct {
		name  string
		class profile.PodClass
		ask   Ask
		want  []string // "type field: detail"
	}{
		{"too many gpus", gpu, Ask{GPUs: ptr.To(9)}, []string{`Invalid value gpus: must be from 1 to 8 for class "gpu"`}},
		{"no gpus", gpu, Ask{GPUs: ptr.To(0)}, []string{`Invalid value gpus: must be from 1 to 8 for class "gpu"`}},
		{"gpus of a class without them", standard, Ask{GPUs: ptr.To(1)}, []string{`Forbidden gpus: class "standard" does not let submitters choose gpus (it gives 0)`}},
		{"memory above the bound", gpu, Ask{Resources: map[string]string{"memory": "65Gi"}}, []string{`Invalid value resources[memory]: must be at most 64Gi for class "gpu"`}},
		{"memory below the bound", gpu, Ask{Resources: map[string]string{"memory": "512Mi"}}, []string{`Invalid value resources[memory]: must be at least 1Gi for class "gpu"`}},
		{"a resource the class does not open", gpu, Ask{Resources: map[string]string{"cpu": "4"}}, []string{`Forbidden resources[cpu]: class "gpu" lets submitters change only gpus, memory, deadline`}},
		{"the gpu resource by name", gpu, Ask{Resources: map[string]string{"nvidia.com/gpu": "2"}}, []string{`Forbidden resources[nvidia.com/gpu]: ask for gpus instead`}},
		{"not a quantity", gpu, Ask{Resources: map[string]string{"memory": "lots"}}, []string{`Invalid value resources[memory]: not a quantity (want e.g. "500m", "16Gi")`}},
		{"a deadline beyond the class's", gpu, Ask{Deadline: "25h"}, []string{`Invalid value deadline: must be at most 24h0m0s for class "gpu"`}},
		{"not a duration", gpu, Ask{Deadline: "soon"}, []string{`Invalid value deadline: not a duration (want e.g. "30m", "6h")`}},
		{"a fraction of a second", gpu, Ask{Deadline: "1500ms"}, []string{`Invalid value deadline: must be a positive whole number of seconds`}},
		{"negative", gpu, Ask{Deadline: "-1h"}, []string{`Invalid value deadline: must be a positive whole number of seconds`}},
		{"everything at once", gpu, Ask{GPUs: ptr.To(9), Resources: map[string]string{"memory": "1Ti"}, Deadline: "99h"}, []string{
			`Invalid value resources[memory]: must be at most 64Gi for class "gpu"`,
			`Invalid value gpus: must be from 1 to 8 for class "gpu"`,
			`Invalid value deadline: must be at most 24h0m0s for class "gpu"`,
		}},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			s, errs := Resolve(tc.class, nil, tc.ask)
			if diff := cmp.Diff(tc.want, render(errs)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if !cmp.Equal(s, workpod.Shape{}) {
				t.Errorf("a refused ask returned a shape: %+v", s)
			}
		})
	}
}

// The class's max_pending is kept with the pod in whole seconds, rounded
// up so that a limit is never shortened; a class without one gives none.
func TestResolveKeepsMaxPending(t *testing.T) {
	for _, tc := range []struct {
		maxPending time.Duration
		want       int64
	}{
		{0, 0},
		{10 * time.Minute, 600},
		{1500 * time.Millisecond, 2},
		{time.Millisecond, 1},
	} {
		c := gpuClass()
		c.MaxPending = profile.Duration{Duration: tc.maxPending}
		s, errs := Resolve(c, nil, Ask{GPUs: ptr.To(2)})
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		if s.MaxPendingSeconds != tc.want {
			t.Errorf("max_pending %s: MaxPendingSeconds %d, want %d", tc.maxPending, s.MaxPendingSeconds, tc.want)
		}
	}
}

// spill_after is kept like max_pending, with max_spills beside it; a class
// without spill_after keeps neither (its pods never move).
func TestResolveKeepsSpill(t *testing.T) {
	c := gpuClass()
	c.SpillAfter, c.MaxSpills = profile.Duration{Duration: 1500 * time.Millisecond}, 3
	s, errs := Resolve(c, nil, Ask{GPUs: ptr.To(2)})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if s.SpillAfterSeconds != 2 || s.MaxSpills != 3 {
		t.Errorf("spill_after 1.5s, max_spills 3: SpillAfterSeconds %d, MaxSpills %d; want 2, 3", s.SpillAfterSeconds, s.MaxSpills)
	}
	c.SpillAfter = profile.Duration{}
	if s, _ := Resolve(c, nil, Ask{GPUs: ptr.To(2)}); s.SpillAfterSeconds != 0 || s.MaxSpills != 0 {
		t.Errorf("no spill_after: SpillAfterSeconds %d, MaxSpills %d; want 0, 0", s.SpillAfterSeconds, s.MaxSpills)
	}
}

func TestAllows(t *testing.T) {
	open := profile.PodClass{Name: "standard"}
	gpu := profile.PodClass{Name: "gpu", Groups: []string{"ml", "research"}}
	for _, tc := range []struct {
		class  profile.PodClass
		groups []string
		want   bool
	}{
		{open, nil, true},
		{gpu, []string{"research"}, true},
		{gpu, []string{"system:authenticated", "ml"}, true},
		{gpu, []string{"system:authenticated"}, false},
		{gpu, nil, false},
		{gpu, []string{"ML"}, false}, // group names are exact
	} {
		if got := Allows(tc.class, tc.groups); got != tc.want {
			t.Errorf("Allows(%s, %v) = %v, want %v", tc.class.Name, tc.groups, got, tc.want)
		}
	}
}

func quantity(l corev1.ResourceList, name corev1.ResourceName) string {
	v, ok := l[name]
	if !ok {
		return ""
	}
	return v.String()
}

func render(errs field.ErrorList) []string {
	var out []string
	for _, e := range errs {
		out = append(out, e.Type.String()+" "+e.Field+": "+e.Detail)
	}
	return out
}

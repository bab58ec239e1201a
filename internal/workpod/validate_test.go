package workpod

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
)

// fieldErr is the part of a field.Error the tests pin: which check, where,
// on what value (Detail is checked where crucible writes it).
type fieldErr struct {
	Type     field.ErrorType
	Field    string
	BadValue any
}

func project(errs field.ErrorList) []fieldErr {
	var out []fieldErr
	for _, e := range errs {
		out = append(out, fieldErr{e.Type, e.Field, e.BadValue})
	}
	return out
}

// omitted is what field.TooLong records instead of the value.
const omitted = "<value omitted>"

// validateCase edits a valid minimal pod and wants Validate's errors.
type validateCase struct {
	name string
	edit func(w *WorkPod)
	want []fieldErr
}

func runValidateCases(t *testing.T, tests []validateCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := WorkPod{ID: "turn-1", Kind: "turn", Image: "busybox", Shape: minimalShape()}
			tt.edit(&w)
			if diff := cmp.Diff(tt.want, project(w.Validate())); diff != "" {
				t.Errorf("Validate (-want +got):\n%s", diff)
			}
		})
	}
}

// The id, kind and image: required, a DNS label, a known kind, printable.
func TestValidateScalars(t *testing.T) {
	runValidateCases(t, []validateCase{
		{name: "valid minimal", edit: func(*WorkPod) {}},
		{name: "valid sample", edit: func(w *WorkPod) { *w = sample() }},
		{name: "valid loop", edit: func(w *WorkPod) { w.Kind = "loop" }},
		{
			name: "id missing",
			edit: func(w *WorkPod) { w.ID = "" },
			want: []fieldErr{{field.ErrorTypeRequired, "id", ""}},
		},
		{
			name: "id not a DNS label",
			edit: func(w *WorkPod) { w.ID = "Turn.1" },
			want: []fieldErr{{field.ErrorTypeInvalid, "id", "Turn.1"}},
		},
		{
			name: "id longer than 63",
			edit: func(w *WorkPod) { w.ID = strings.Repeat("a", 64) },
			want: []fieldErr{{field.ErrorTypeInvalid, "id", strings.Repeat("a", 64)}},
		},
		{
			name: "kind missing",
			edit: func(w *WorkPod) { w.Kind = "" },
			want: []fieldErr{{field.ErrorTypeRequired, "kind", ""}},
		},
		{
			name: "kind unknown",
			edit: func(w *WorkPod) { w.Kind = "job" },
			want: []fieldErr{{field.ErrorTypeNotSupported, "kind", "job"}},
		},
		{
			name: "image missing",
			edit: func(w *WorkPod) { w.Image = "" },
			want: []fieldErr{{field.ErrorTypeRequired, "image", ""}},
		},
		{
			name: "image with whitespace",
			edit: func(w *WorkPod) { w.Image = " busybox" },
			want: []fieldErr{{field.ErrorTypeInvalid, "image", " busybox"}},
		},
		{
			name: "image with a control character",
			edit: func(w *WorkPod) { w.Image = "busy\x7fbox" },
			want: []fieldErr{{field.ErrorTypeInvalid, "image", "busy\x7fbox"}},
		},
		{
			name: "image not UTF-8",
			edit: func(w *WorkPod) { w.Image = "busy\xffbox" },
			want: []fieldErr{{field.ErrorTypeInvalid, "image", "busy\xffbox"}},
		},
	})
}

// Env names, and file keys and sizes.
func TestValidateEnvAndFiles(t *testing.T) {
	runValidateCases(t, []validateCase{
		{
			name: "env problems",
			edit: func(w *WorkPod) {
				w.Env = []EnvVar{
					{Name: "OK", Value: "1"},
					{Name: ""},
					{Name: "my.var"},
					{Name: "1X"},
					{Name: "CRUCIBLE_INGEST_URL", Value: "https://evil.example.com"},
					{Name: "OK", Value: "2"},
				}
			},
			want: []fieldErr{
				{field.ErrorTypeRequired, "env[1].name", ""},
				{field.ErrorTypeInvalid, "env[2].name", "my.var"},
				{field.ErrorTypeInvalid, "env[3].name", "1X"},
				{field.ErrorTypeInvalid, "env[4].name", "CRUCIBLE_INGEST_URL"},
				{field.ErrorTypeDuplicate, "env[5].name", "OK"},
			},
		},
		{
			name: "file keys",
			edit: func(w *WorkPod) {
				w.Files = map[string]string{"ok.txt": "", "../etc": "", "a/b": "", "..": "", strings.Repeat("k", 254): ""}
			},
			want: []fieldErr{
				{field.ErrorTypeInvalid, "files[..]", ".."},
				{field.ErrorTypeInvalid, "files[../etc]", "../etc"},
				{field.ErrorTypeInvalid, "files[a/b]", "a/b"},
				{field.ErrorTypeInvalid, "files[" + strings.Repeat("k", 254) + "]", strings.Repeat("k", 254)},
			},
		},
		{
			name: "file not UTF-8",
			edit: func(w *WorkPod) { w.Files = map[string]string{"bin": "\xff"} },
			want: []fieldErr{{field.ErrorTypeInvalid, "files[bin]", ""}},
		},
		{
			name: "files too large",
			edit: func(w *WorkPod) {
				w.Files = map[string]string{"a": strings.Repeat("x", 500<<10), "b": strings.Repeat("x", 400<<10)}
			},
			want: []fieldErr{{field.ErrorTypeTooLong, "files", omitted}},
		},
		{
			name: "files exactly at the limit",
			edit: func(w *WorkPod) { w.Files = map[string]string{"a": strings.Repeat("x", MaxFilesBytes-1)} },
		},
		{
			name: "secret file keys and size",
			edit: func(w *WorkPod) {
				w.SecretFiles = map[string]string{"bad key": "\xff", "big": strings.Repeat("x", MaxSecretFilesBytes)}
			},
			want: []fieldErr{
				{field.ErrorTypeInvalid, "secret_files[bad key]", "bad key"},
				{field.ErrorTypeTooLong, "secret_files", omitted},
			},
		},
	})
}

// Annotation keys and size, and every problem at once in field order.
func TestValidateAnnotations(t *testing.T) {
	runValidateCases(t, []validateCase{
		{
			name: "annotation keys",
			edit: func(w *WorkPod) {
				w.Annotations = map[string]string{"ok.example.com/Key": "v", "bad key": "v", "a/b/c": "v", "": "v"}
			},
			want: []fieldErr{
				{field.ErrorTypeInvalid, "annotations[]", ""},
				{field.ErrorTypeInvalid, "annotations[a/b/c]", "a/b/c"},
				{field.ErrorTypeInvalid, "annotations[bad key]", "bad key"},
			},
		},
		{
			name: "annotations too large",
			edit: func(w *WorkPod) { w.Annotations = map[string]string{"a": strings.Repeat("x", 256<<10)} },
			want: []fieldErr{{field.ErrorTypeTooLong, "annotations", omitted}},
		},
		{
			name: "everything at once, in field order",
			edit: func(w *WorkPod) {
				*w = WorkPod{Env: []EnvVar{{Name: "-"}}, Files: map[string]string{"/": ""}, SecretFiles: map[string]string{"/": ""}, Annotations: map[string]string{"/": ""}}
			},
			want: []fieldErr{
				{field.ErrorTypeRequired, "id", ""},
				{field.ErrorTypeRequired, "kind", ""},
				{field.ErrorTypeRequired, "image", ""},
				{field.ErrorTypeInvalid, "env[0].name", "-"},
				{field.ErrorTypeInvalid, "files[/]", "/"},
				{field.ErrorTypeInvalid, "secret_files[/]", "/"},
				{field.ErrorTypeInvalid, "annotations[/]", "/"},
				{field.ErrorTypeRequired, "shape.deadline_seconds", ""},
				{field.ErrorTypeRequired, "shape.run_as_user", ""},
			},
		},
	})
}

func TestValidateMessages(t *testing.T) {
	w := WorkPod{ID: "t", Kind: "turn", Image: "x", Env: []EnvVar{{Name: "CRUCIBLE_X"}}, Files: map[string]string{"b": "\xff"}, Shape: minimalShape()}
	var got []string
	for _, e := range w.Validate() {
		got = append(got, e.Error())
	}
	want := []string{
		`env[0].name: Invalid value: "CRUCIBLE_X": names starting with CRUCIBLE_ are reserved for crucible`,
		`files[b]: Invalid value: "": must be valid UTF-8 (use secret_files for binary content)`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// sample is a work pod using every field.
func sample() WorkPod {
	return WorkPod{
		ID:          "turn-1",
		Kind:        KindTurn,
		Image:       "ghcr.io/example/agent:1.2",
		Command:     []string{"agent"},
		Args:        []string{"--once", "--verbose"},
		Env:         []EnvVar{{Name: "MODEL", Value: "m1"}, {Name: "A_B", Value: ""}},
		Files:       map[string]string{"prompt.md": "# hi\n", "config.json": "{}"},
		SecretFiles: map[string]string{"api-key": "s3cret\x00\xff"},
		Annotations: map[string]string{"pod-complete.stage.kwok.x-k8s.io/delay": "1s"},
		Shape: Shape{
			Class: "gpu", DeadlineSeconds: 3600, RunAsUser: 65532, RunAsGroup: 65532,
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{"cpu": resource.MustParse("1"), "nvidia.com/gpu": resource.MustParse("2")},
				Limits:   corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")},
			},
			Tolerations:  []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			NodeSelector: map[string]string{"nvidia.com/gpu.present": "true"},
			Shm:          ptr.To(resource.MustParse("8Gi")),
		},
	}
}

// minimalShape is the least a checked pod has: a deadline and a user.
func minimalShape() Shape {
	return Shape{Class: "standard", DeadlineSeconds: 3600, RunAsUser: 65532, RunAsGroup: 65532}
}

// Check returns Validate's problems and no Valid, or a Valid holding a copy
// of the pod that later changes to the caller's pod (or to what Pod
// returned) do not reach.
func TestCheck(t *testing.T) {
	if v, errs := Check(WorkPod{ID: "turn-1", Kind: "job", Image: "x", Shape: minimalShape()}); !v.IsZero() ||
		cmp.Diff([]fieldErr{{field.ErrorTypeNotSupported, "kind", "job"}}, project(errs)) != "" {
		t.Errorf("Check of an invalid pod = %+v, %v; want the zero Valid and the kind's error", v, errs)
	}

	w := sample()
	v, errs := Check(w)
	if len(errs) > 0 || v.IsZero() {
		t.Fatalf("Check(sample) = %v, zero %v", errs, v.IsZero())
	}
	w.Command[0], w.Env[0].Name, w.Files["prompt.md"], w.SecretFiles["x"], w.Annotations["x"] = "rm", "CRUCIBLE_X", "changed", "y", "y"
	w.Args = append(w.Args[:0], "--evil")
	got := v.Pod()
	if diff := cmp.Diff(sample(), got); diff != "" {
		t.Errorf("the checked pod changed with the caller's (-want +got):\n%s", diff)
	}
	got.Files["prompt.md"], got.Env[0].Value = "changed", "changed"
	got.Shape.Resources.Requests["cpu"] = resource.MustParse("99")
	got.Shape.Tolerations[0].Key, got.Shape.NodeSelector["x"] = "changed", "changed"
	if diff := cmp.Diff(sample(), v.Pod()); diff != "" {
		t.Errorf("the checked pod changed with Pod's copy (-want +got):\n%s", diff)
	}
}

// A minimal pod stays minimal through Check: absent slices and maps stay
// nil, so the renderer sets no empty fields.
func TestCheckKeepsNil(t *testing.T) {
	w := WorkPod{ID: "loop-7", Kind: KindLoop, Image: "busybox", Shape: minimalShape()}
	v, errs := Check(w)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	// cmp tells a nil slice or map from an empty one.
	if diff := cmp.Diff(w, v.Pod()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestZeroValid(t *testing.T) {
	var v Valid
	if !v.IsZero() {
		t.Error("the zero Valid is not IsZero")
	}
	if diff := cmp.Diff(WorkPod{}, v.Pod()); diff != "" {
		t.Errorf("zero Valid's pod (-want +got):\n%s", diff)
	}
}

func TestLabels(t *testing.T) {
	want := map[string]string{
		"app.kubernetes.io/managed-by": "crucible",
		"crucible.dev/instance":        "hub-1",
		"crucible.dev/work-pod":        "loop-7",
		"crucible.dev/kind":            "loop",
	}
	if diff := cmp.Diff(want, Labels("hub-1", WorkPod{ID: "loop-7", Kind: KindLoop, Image: "x"})); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// WithShape gives the checked pod another spoke's shape, checked as Check
// checks one, and leaves the original and the caller's shape unreachable.
func TestWithShape(t *testing.T) {
	v, errs := Check(sample())
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	other := minimalShape()
	other.NodeSelector = map[string]string{"pool": "h100"}
	w, errs := v.WithShape(other)
	if len(errs) > 0 || w.IsZero() {
		t.Fatalf("WithShape(minimal) = %v, zero %v", errs, w.IsZero())
	}
	other.NodeSelector["pool"] = "changed"
	want := sample()
	want.Shape = minimalShape()
	want.Shape.NodeSelector = map[string]string{"pool": "h100"}
	if diff := cmp.Diff(want, w.Pod()); diff != "" {
		t.Errorf("WithShape's pod (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(sample(), v.Pod()); diff != "" {
		t.Errorf("the original changed (-want +got):\n%s", diff)
	}

	bad := minimalShape()
	bad.DeadlineSeconds = 0
	if w, errs := v.WithShape(bad); !w.IsZero() || cmp.Diff([]fieldErr{{field.ErrorTypeRequired, "shape.deadline_seconds", ""}}, project(errs)) != "" {
		t.Errorf("WithShape(no deadline) = zero %v, %v; want the zero Valid and the deadline's error", w.IsZero(), errs)
	}
	if w, errs := (Valid{}).WithShape(minimalShape()); !w.IsZero() || len(errs) != 1 {
		t.Errorf("zero Valid's WithShape = zero %v, %v; want the zero Valid and an error", w.IsZero(), errs)
	}
}

package workpod

import (
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/validate/content"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Valid is a work pod that Check accepted. Its pod is reachable only as a
// copy (Pod), so what was checked cannot change afterwards, and a function
// that takes a Valid needs no checks of its own.
type Valid struct{ w *WorkPod }

// Check validates w and, if it has no problems, returns a copy of it as a
// Valid. It is the one place a work pod is validated.
func Check(w WorkPod) (Valid, field.ErrorList) {
	if errs := w.Validate(); len(errs) > 0 {
		return Valid{}, errs
	}
	c := w.clone()
	return Valid{w: &c}, nil
}

// Pod returns a copy of the checked work pod; the zero Valid's is empty.
func (v Valid) Pod() WorkPod {
	if v.w == nil {
		return WorkPod{}
	}
	return v.w.clone()
}

// WithShape is v's pod with another shape: the same pod as another spoke's
// class shapes it, which placement judges on every candidate spoke. Only
// the shape is checked again (as Check checks it); the rest was, once.
// The two share what neither can change (their pods leave only as copies).
func (v Valid) WithShape(s Shape) (Valid, field.ErrorList) {
	if v.w == nil {
		return Valid{}, field.ErrorList{field.Required(field.NewPath("id"), "an unchecked work pod has no shape to change")}
	}
	if errs := validateShape(s); len(errs) > 0 {
		return Valid{}, errs
	}
	c := *v.w
	c.Shape = s.clone()
	return Valid{w: &c}, nil
}

// IsZero reports whether v is the zero Valid, which Check never returns.
func (v Valid) IsZero() bool { return v.w == nil }

// Validate reports every problem of w, each with its field path (e.g.
// "env[2].name"), in field order; map keys are checked in sorted order.
func (w WorkPod) Validate() field.ErrorList {
	var errs field.ErrorList
	if w.ID == "" {
		errs = append(errs, field.Required(field.NewPath("id"), ""))
	} else {
		errs = appendInvalid(errs, field.NewPath("id"), w.ID, validation.IsDNS1123Label(w.ID))
	}
	if err := CheckKind(w.Kind); err != nil {
		errs = append(errs, err)
	}
	switch {
	case w.Image == "":
		errs = append(errs, field.Required(field.NewPath("image"), ""))
	case strings.ContainsFunc(w.Image, func(r rune) bool { return r <= ' ' || r == 0x7f || r == utf8.RuneError }):
		errs = append(errs, field.Invalid(field.NewPath("image"), w.Image, "must not contain whitespace, control characters or invalid UTF-8"))
	}
	errs = append(errs, validateEnv(w.Env)...)
	errs = append(errs, validateFiles(field.NewPath("files"), w.Files, MaxFilesBytes, true)...)
	errs = append(errs, validateFiles(field.NewPath("secret_files"), w.SecretFiles, MaxSecretFilesBytes, false)...)
	errs = append(errs, validateAnnotations(w.Annotations)...)
	return append(errs, validateShape(w.Shape)...)
}

func validateEnv(env []EnvVar) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	for i, e := range env {
		p := field.NewPath("env").Index(i).Child("name")
		switch {
		case e.Name == "":
			errs = append(errs, field.Required(p, ""))
			continue
		case strings.HasPrefix(e.Name, ReservedEnvPrefix):
			errs = append(errs, field.Invalid(p, e.Name, "names starting with "+ReservedEnvPrefix+" are reserved for crucible"))
		default:
			// C identifiers: what every shell and runtime can export.
			errs = appendInvalid(errs, p, e.Name, content.IsCIdentifier(e.Name))
		}
		if seen[e.Name] {
			errs = append(errs, field.Duplicate(p, e.Name))
		}
		seen[e.Name] = true
	}
	return errs
}

// validateFiles checks ConfigMap (utf8) or Secret keys and the total size.
func validateFiles(p *field.Path, files map[string]string, limit int, utf8Only bool) field.ErrorList {
	var errs field.ErrorList
	size := 0
	for _, k := range slices.Sorted(maps.Keys(files)) {
		v := files[k]
		size += len(k) + len(v)
		errs = appendInvalid(errs, p.Key(k), k, validation.IsConfigMapKey(k))
		if utf8Only && !utf8.ValidString(v) {
			errs = append(errs, field.Invalid(p.Key(k), "", "must be valid UTF-8 (use secret_files for binary content)"))
		}
	}
	if size > limit {
		errs = append(errs, field.TooLong(p, "", limit))
	}
	return errs
}

func validateAnnotations(annotations map[string]string) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("annotations")
	size := 0
	for _, k := range slices.Sorted(maps.Keys(annotations)) {
		size += len(k) + len(annotations[k])
		// As the API server: a qualified name, case-insensitively.
		errs = appendInvalid(errs, p.Key(k), k, validation.IsQualifiedName(strings.ToLower(k)))
	}
	if size > apimachineryvalidation.TotalAnnotationSizeLimitB {
		errs = append(errs, field.TooLong(p, "", apimachineryvalidation.TotalAnnotationSizeLimitB))
	}
	return errs
}

// appendInvalid adds one error for value carrying all of msgs, if any.
func appendInvalid(errs field.ErrorList, p *field.Path, value string, msgs []string) field.ErrorList {
	if len(msgs) == 0 {
		return errs
	}
	return append(errs, field.Invalid(p, value, strings.Join(msgs, "; ")))
}

// ShapeKind is the kind whose default class shapes a pod of kind: kind
// itself, or DefaultKind for one Check will refuse, so that Check reports
// every other problem of the pod too rather than a missing shape.
func ShapeKind(kind string) string {
	if CheckKind(kind) != nil {
		return DefaultKind
	}
	return kind
}

// CheckKind is Validate's rule for the kind.
func CheckKind(kind string) *field.Error {
	switch kind {
	case KindLoop, KindTurn:
		return nil
	case "":
		return field.Required(field.NewPath("kind"), `"loop" or "turn"`)
	}
	return field.NotSupported(field.NewPath("kind"), kind, []string{KindLoop, KindTurn})
}

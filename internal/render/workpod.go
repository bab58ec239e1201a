package render

import (
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Origin labels, on every object crucible creates on a spoke. Reconcile and
// sweep list by them and never touch an object without them.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedByValue = "crucible"
	// LabelInstance is the profile's controller.instance.
	LabelInstance = "crucible.dev/instance"
	// LabelWorkPod is the work pod's id (its pod name).
	LabelWorkPod = "crucible.dev/work-pod"
	// LabelKind is "loop" or "turn".
	LabelKind = "crucible.dev/kind"
)

// Work pod kinds.
const (
	KindLoop = "loop"
	KindTurn = "turn"
)

// Where a work pod finds what crucible gives it.
const (
	// EnvIngestURL is the drop-box's base URL (the cluster's ingest_url).
	EnvIngestURL = "CRUCIBLE_INGEST_URL"
	// EnvIngestTokenFile names the file holding the pod's ingest token.
	EnvIngestTokenFile = "CRUCIBLE_INGEST_TOKEN_FILE"
	// EnvWorkPod is the work pod's id.
	EnvWorkPod = "CRUCIBLE_WORK_POD"
	// ReservedEnvPrefix starts every variable crucible sets; users may not.
	ReservedEnvPrefix = "CRUCIBLE_"

	IngestTokenDir   = "/var/run/secrets/crucible/ingest" //nolint:gosec // G101: a mount path, not a credential
	IngestTokenPath  = IngestTokenDir + "/token"          //nolint:gosec // G101: a mount path, not a credential
	FilesMountPath   = "/etc/crucible/files"
	SecretsMountPath = "/etc/crucible/secrets" //nolint:gosec // G101: a mount path, not a credential

	// MaxFilesBytes and MaxSecretFilesBytes bound the keys plus values of
	// Files and SecretFiles, under the API server's 1 MiB object limit with
	// room for metadata.
	MaxFilesBytes       = 900 << 10
	MaxSecretFilesBytes = 900 << 10
)

// EnvVar is one environment variable of a work pod.
type EnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// WorkPod is what a user submits, as the API decoded it.
type WorkPod struct {
	// ID is the pod's name: a DNS label of at most 63 characters.
	ID string `json:"id"`
	// Kind is "loop" or "turn".
	Kind    string   `json:"kind"`
	Image   string   `json:"image"`
	Command []string `json:"command,omitempty"`
	Args    []string `json:"args,omitempty"`
	Env     []EnvVar `json:"env,omitempty"`
	// Files become a ConfigMap mounted at FilesMountPath, one file per key.
	Files map[string]string `json:"files,omitempty"`
	// SecretFiles become a Secret mounted at SecretsMountPath.
	SecretFiles map[string]string `json:"secret_files,omitempty"`
	// Annotations are copied onto the pod.
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Validate reports every problem of w, each with its field path (e.g.
// "env[2].name"), in field order; map keys are checked in sorted order.
func (w WorkPod) Validate() field.ErrorList {
	var errs field.ErrorList
	if w.ID == "" {
		errs = append(errs, field.Required(field.NewPath("id"), ""))
	} else {
		errs = appendInvalid(errs, field.NewPath("id"), w.ID, validation.IsDNS1123Label(w.ID))
	}
	switch w.Kind {
	case KindLoop, KindTurn:
	case "":
		errs = append(errs, field.Required(field.NewPath("kind"), `"loop" or "turn"`))
	default:
		errs = append(errs, field.NotSupported(field.NewPath("kind"), w.Kind, []string{KindLoop, KindTurn}))
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
	return errs
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
	})
	work := &spec.Containers[0]
	work.VolumeMounts = append(work.VolumeMounts, corev1.VolumeMount{Name: volumeBin, MountPath: BinDir, ReadOnly: true})
	work.Env = append(work.Env, corev1.EnvVar{Name: EnvBinDir, Value: BinDir})
	if !slices.ContainsFunc(work.Env, func(e corev1.EnvVar) bool { return e.Name == "PATH" }) {
		work.Env = append(work.Env, corev1.EnvVar{Name: "PATH", Value: binPath})
	}
}

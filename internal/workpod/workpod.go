// Package workpod owns what a work pod is: the type a user submits, its
// kinds, its origin labels and the one validation of it. It is the single
// definition shared by the API (which decodes and checks submissions), the
// renderer (which turns a checked pod into spoke objects), the dispatcher
// and the reconciler (which find crucible's pods by their labels) and the
// CLI; none of them keeps a copy of these rules.
//
// A work pod is validated once, by Check, where it enters crucible. Check's
// Valid is what everything downstream takes, so an unchecked pod cannot
// reach the renderer and nothing downstream validates again.
package workpod

import (
	"maps"
	"slices"
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
	// LabelKind is the work pod's kind.
	LabelKind = "crucible.dev/kind"
)

// Work pod kinds: a loop is a long-running pod, a turn a short one.
const (
	KindLoop = "loop"
	KindTurn = "turn"
	// DefaultKind is the kind of a submission that names none.
	DefaultKind = KindTurn
)

const (
	// ReservedEnvPrefix starts every variable crucible sets in a work pod;
	// a submitter may not set one, so crucible's values cannot be shadowed.
	ReservedEnvPrefix = "CRUCIBLE_"

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
	// Kind is KindLoop or KindTurn.
	Kind    string   `json:"kind"`
	Image   string   `json:"image"`
	Command []string `json:"command,omitempty"`
	Args    []string `json:"args,omitempty"`
	Env     []EnvVar `json:"env,omitempty"`
	// Files become a ConfigMap mounted in the pod, one file per key.
	Files map[string]string `json:"files,omitempty"`
	// SecretFiles become a Secret mounted in the pod.
	SecretFiles map[string]string `json:"secret_files,omitempty"`
	// Annotations are copied onto the pod.
	Annotations map[string]string `json:"annotations,omitempty"`
	// Shape is what the pod asks of the spoke, from its class.
	Shape Shape `json:"shape"`
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

// clone copies w's slices and maps (nil stays nil), so a copy shares nothing
// a caller could change afterwards.
func (w WorkPod) clone() WorkPod {
	w.Command = slices.Clone(w.Command)
	w.Args = slices.Clone(w.Args)
	w.Env = slices.Clone(w.Env)
	w.Files = maps.Clone(w.Files)
	w.SecretFiles = maps.Clone(w.SecretFiles)
	w.Annotations = maps.Clone(w.Annotations)
	w.Shape = w.Shape.clone()
	return w
}

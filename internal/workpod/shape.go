package workpod

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Shape is what a work pod asks of its spoke, resolved from its pod class
// and the submitter's ask when it was submitted (package podclass). It is
// kept with the work pod, so the pod is rendered as it was accepted even
// if the profile's class changes afterwards.
type Shape struct {
	// Class is the pod class it came from.
	Class             string                      `json:"class"`
	Resources         corev1.ResourceRequirements `json:"resources,omitzero"`
	Tolerations       []corev1.Toleration         `json:"tolerations,omitempty"`
	NodeSelector      map[string]string           `json:"node_selector,omitempty"`
	Affinity          *corev1.Affinity            `json:"affinity,omitempty"`
	PriorityClassName string                      `json:"priority_class_name,omitempty"`
	RuntimeClassName  string                      `json:"runtime_class_name,omitempty"`
	// DeadlineSeconds is the pod's activeDeadlineSeconds: every work pod
	// has one, so a pod whose hub is gone cannot hold its GPU forever.
	DeadlineSeconds int64 `json:"deadline_seconds"`
	// MaxPendingSeconds is how long the scheduler may leave the pod
	// unplaced before the reconciler gives up on it and fails its row (the
	// class's max_pending); 0, as in pods submitted before it was kept: no
	// limit.
	MaxPendingSeconds int64 `json:"max_pending_seconds,omitempty"`
	// SpillAfterSeconds is how long a placed pod may wait unschedulable
	// before it moves to another spoke (the class's spill_after; 0: it
	// never moves), at most MaxSpills times.
	SpillAfterSeconds int64 `json:"spill_after_seconds,omitempty"`
	MaxSpills         int   `json:"max_spills,omitempty"`
	// Shm is the size of a memory-backed /dev/shm; nil: none.
	Shm *resource.Quantity `json:"shm,omitempty"`
	// RunAsUser and RunAsGroup are every container's non-root identity.
	RunAsUser  int64 `json:"run_as_user"`
	RunAsGroup int64 `json:"run_as_group"`
}

// validateShape holds the two promises every rendered pod keeps: a
// deadline, and a non-root user (Pod Security "restricted").
func validateShape(s Shape) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("shape")
	if s.DeadlineSeconds <= 0 {
		errs = append(errs, field.Required(p.Child("deadline_seconds"), "every work pod has a deadline (its class's)"))
	}
	if s.RunAsUser <= 0 {
		errs = append(errs, field.Required(p.Child("run_as_user"), "every work pod runs as a non-root user (its class's)"))
	}
	if s.RunAsGroup < 0 {
		errs = append(errs, field.Invalid(p.Child("run_as_group"), s.RunAsGroup, "must not be negative"))
	}
	return errs
}

func (s Shape) clone() Shape {
	s.Resources = *s.Resources.DeepCopy()
	s.Tolerations = slices.Clone(s.Tolerations)
	for i := range s.Tolerations {
		s.Tolerations[i] = *s.Tolerations[i].DeepCopy()
	}
	s.NodeSelector = maps.Clone(s.NodeSelector)
	s.Affinity = s.Affinity.DeepCopy()
	if s.Shm != nil {
		q := s.Shm.DeepCopy()
		s.Shm = &q
	}
	return s
}

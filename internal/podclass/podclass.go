// Package podclass turns a pod class of the profile (R-P1) and what a
// submitter asked of it into the shape of one work pod: its resources,
// placement, deadline and identity. It is the one place a class's bounds are
// checked, so the API, `crucible render turn` and the chart's values all
// refuse the same asks with the same field paths.
package podclass

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/workpod"
)

// Ask is what a submitter asks of a class; zero fields take the class's.
type Ask struct {
	// GPUs is how many GPUs, within the class's allow.gpus.
	GPUs *int
	// Resources are requests by resource name ("memory": "32Gi"), each
	// within the class's allow.resources.
	Resources map[string]string
	// Deadline is the pod's deadline as a Go duration ("6h"), at most the
	// class's max_deadline.
	Deadline string
}

// Resolve is the shape of a pod of class c asked for with ask, or every
// field of ask that c does not allow, each naming the bound it breaks.
// globalSelector is the profile's [pods] node_selector, under the class's.
func Resolve(c profile.PodClass, globalSelector map[string]string, ask Ask) (workpod.Shape, field.ErrorList) {
	var errs field.ErrorList
	requests := corev1.ResourceList{}
	limits := corev1.ResourceList{}
	for name, q := range c.Requests {
		requests[corev1.ResourceName(name)] = q.Quantity
	}
	for name, q := range c.Limits {
		limits[corev1.ResourceName(name)] = q.Quantity
	}
	errs = append(errs, askResources(c, ask.Resources, requests, limits)...)
	gpus, gerrs := askGPUs(c, ask.GPUs)
	errs = append(errs, gerrs...)
	if gpus > 0 {
		n := *resource.NewQuantity(int64(gpus), resource.DecimalSI)
		requests[corev1.ResourceName(c.GPUResource)] = n
		limits[corev1.ResourceName(c.GPUResource)] = n
	}
	deadline, derrs := askDeadline(c, ask.Deadline)
	errs = append(errs, derrs...)
	if len(errs) > 0 {
		return workpod.Shape{}, errs
	}
	s := workpod.Shape{
		Class:             c.Name,
		Resources:         corev1.ResourceRequirements{Requests: requests, Limits: limits},
		Tolerations:       tolerations(c.Tolerations),
		NodeSelector:      nodeSelector(globalSelector, c.NodeSelector),
		Affinity:          affinity(c.NodeAffinity),
		PriorityClassName: c.PriorityClass,
		RuntimeClassName:  c.RuntimeClass,
		DeadlineSeconds:   int64(deadline / time.Second),
		MaxPendingSeconds: wholeSeconds(c.MaxPending.Duration),
		SpillAfterSeconds: wholeSeconds(c.SpillAfter.Duration),
		RunAsUser:         c.RunAsUser,
		RunAsGroup:        c.RunAsGroup,
	}
	if s.SpillAfterSeconds > 0 {
		s.MaxSpills = c.MaxSpills
	}
	if c.Shm.Sign() > 0 {
		s.Shm = ptr.To(c.Shm.Quantity)
	}
	return s, nil
}

// Allows reports whether a caller in groups may submit with class c: a class
// without groups is anyone's who may create on the cluster.
func Allows(c profile.PodClass, groups []string) bool {
	if len(c.Groups) == 0 {
		return true
	}
	return slices.ContainsFunc(groups, func(g string) bool { return slices.Contains(c.Groups, g) })
}

func askGPUs(c profile.PodClass, ask *int) (int, field.ErrorList) {
	if ask == nil {
		return c.GPUs, nil
	}
	p := field.NewPath("gpus")
	b := c.Allow.GPUs
	switch {
	case b.Max == 0:
		return 0, field.ErrorList{field.Forbidden(p, fmt.Sprintf("class %q does not let submitters choose gpus (it gives %d)", c.Name, c.GPUs))}
	case *ask < b.Min || *ask > b.Max:
		return 0, field.ErrorList{field.Invalid(p, *ask, fmt.Sprintf("must be from %d to %d for class %q", b.Min, b.Max, c.Name))}
	}
	return *ask, nil
}

// askResources sets each asked resource as the request, and as the limit
// too where the class limits it (a limit below the request is refused by
// the API server).
func askResources(c profile.PodClass, ask map[string]string, requests, limits corev1.ResourceList) field.ErrorList {
	var errs field.ErrorList
	for _, name := range slices.Sorted(maps.Keys(ask)) {
		p := field.NewPath("resources").Key(name)
		q, err := resource.ParseQuantity(ask[name])
		if err != nil {
			errs = append(errs, field.Invalid(p, ask[name], "not a quantity (want e.g. \"500m\", \"16Gi\")"))
			continue
		}
		b, ok := c.Allow.Resources[name]
		switch {
		case name == c.GPUResource:
			errs = append(errs, field.Forbidden(p, "ask for gpus instead"))
			continue
		case !ok:
			errs = append(errs, field.Forbidden(p, fmt.Sprintf("class %q lets submitters change %s", c.Name, allowedNames(c))))
			continue
		case q.Cmp(b.Max.Quantity) > 0:
			errs = append(errs, field.Invalid(p, ask[name], fmt.Sprintf("must be at most %s for class %q", b.Max.String(), c.Name)))
			continue
		case q.Cmp(b.Min.Quantity) < 0:
			errs = append(errs, field.Invalid(p, ask[name], fmt.Sprintf("must be at least %s for class %q", b.Min.String(), c.Name)))
			continue
		}
		rn := corev1.ResourceName(name)
		requests[rn] = q
		if _, limited := limits[rn]; limited {
			limits[rn] = q
		}
	}
	return errs
}

func allowedNames(c profile.PodClass) string {
	var names []string
	if c.Allow.GPUs.Max > 0 {
		names = append(names, "gpus")
	}
	names = append(names, slices.Sorted(maps.Keys(c.Allow.Resources))...)
	names = append(names, "deadline")
	return "only " + strings.Join(names, ", ")
}

func askDeadline(c profile.PodClass, ask string) (time.Duration, field.ErrorList) {
	if ask == "" {
		return c.Deadline.Duration, nil
	}
	p := field.NewPath("deadline")
	d, err := time.ParseDuration(ask)
	switch {
	case err != nil:
		return 0, field.ErrorList{field.Invalid(p, ask, "not a duration (want e.g. \"30m\", \"6h\")")}
	case d <= 0 || d%time.Second != 0:
		return 0, field.ErrorList{field.Invalid(p, ask, "must be a positive whole number of seconds")}
	case d > c.MaxDeadline.Duration:
		return 0, field.ErrorList{field.Invalid(p, ask, fmt.Sprintf("must be at most %s for class %q", c.MaxDeadline.Duration, c.Name))}
	}
	return d, nil
}

// wholeSeconds is d in seconds, rounded up: a limit is never shortened,
// and a sub-second one is not lost to zero (no limit).
func wholeSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

func tolerations(ts []profile.Toleration) []corev1.Toleration {
	out := make([]corev1.Toleration, 0, len(ts))
	for _, t := range ts {
		ct := corev1.Toleration{Key: t.Key, Operator: corev1.TolerationOperator(t.Operator), Value: t.Value, Effect: corev1.TaintEffect(t.Effect)}
		if t.TolerationSeconds != 0 {
			ct.TolerationSeconds = ptr.To(t.TolerationSeconds)
		}
		out = append(out, ct)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func nodeSelector(global, class map[string]string) map[string]string {
	if len(global)+len(class) == 0 {
		return nil
	}
	out := maps.Clone(global)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, class)
	return out
}

func affinity(reqs []profile.NodeRequirement) *corev1.Affinity {
	if len(reqs) == 0 {
		return nil
	}
	term := corev1.NodeSelectorTerm{}
	for _, r := range reqs {
		term.MatchExpressions = append(term.MatchExpressions, corev1.NodeSelectorRequirement{
			Key: r.Key, Operator: corev1.NodeSelectorOperator(r.Operator), Values: slices.Clone(r.Values),
		})
	}
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{term}},
	}}
}

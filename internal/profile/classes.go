package profile

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"crucible.dev/crucible/internal/workpod"
)

// Quantity is a Kubernetes quantity ("500m", "16Gi", "1") in the profile,
// parsed by apimachinery's resource package so that the profile accepts
// exactly what a pod spec does.
type Quantity struct{ resource.Quantity }

// UnmarshalText implements encoding.TextUnmarshaler.
func (q *Quantity) UnmarshalText(text []byte) error {
	v, err := resource.ParseQuantity(string(text))
	if err != nil {
		return fmt.Errorf("not a quantity (want e.g. \"500m\", \"16Gi\", \"1\")")
	}
	q.Quantity = v
	return nil
}

// MarshalText implements encoding.TextMarshaler.
func (q Quantity) MarshalText() ([]byte, error) { return []byte(q.String()), nil }

// String, Sign and Cmp are resource.Quantity's, on a value: a Quantity in a
// map of the profile is not addressable.
func (q Quantity) String() string              { return q.Quantity.String() }
func (q Quantity) Sign() int                   { return q.Quantity.Sign() }
func (q Quantity) Cmp(o resource.Quantity) int { return q.Quantity.Cmp(o) }

// PodClass is a named pod template (R-P1, ADR-0048's turn profiles): what a
// work pod asks of the spoke's scheduler and kubelet, and what a submitter
// may change of it. Every class has a deadline: a pod whose hub is gone for
// good must not hold its GPU forever.
type PodClass struct {
	Name string `toml:"name"`
	// DefaultFor are the kinds ("loop", "turn") that get this class when a
	// submission names none; each kind has exactly one default.
	DefaultFor []string `toml:"default_for"`
	// Groups are the hub groups that may submit with this class; empty:
	// anyone who may create work pods on the cluster.
	Groups []string `toml:"groups"`

	Requests map[string]Quantity `toml:"requests"`
	Limits   map[string]Quantity `toml:"limits"`
	// GPUs is how many GPUs a pod of this class gets unless the submitter
	// asks otherwise (within Allow.GPUs); set as both request and limit of
	// GPUResource, as the device plugin requires.
	GPUs        int    `toml:"gpus"`
	GPUResource string `toml:"gpu_resource"`

	Tolerations  []Toleration      `toml:"tolerations"`
	NodeSelector map[string]string `toml:"node_selector"`
	// NodeAffinity are required node selector requirements, all of which a
	// node must meet (one nodeSelectorTerm).
	NodeAffinity  []NodeRequirement `toml:"node_affinity"`
	PriorityClass string            `toml:"priority_class"`
	RuntimeClass  string            `toml:"runtime_class"`

	// Deadline is the pod's activeDeadlineSeconds unless the submitter asks
	// for another, at most MaxDeadline. The spoke's kubelet enforces it, so
	// it holds while the hub is away.
	Deadline    Duration `toml:"deadline"`
	MaxDeadline Duration `toml:"max_deadline"`
	// MaxPending, when set, cancels a pod the scheduler has not placed for
	// this long and fails its row with the scheduler's message.
	MaxPending Duration `toml:"max_pending"`
	// SpillAfter, when set, moves a placed pod that never started and waits
	// Unschedulable this long to another spoke (R-PL3), at most MaxSpills
	// times; shorter than MaxPending, so the move comes before the failure.
	SpillAfter Duration `toml:"spill_after"`
	MaxSpills  int      `toml:"max_spills"`
	// Shm is the size of a memory-backed /dev/shm (zero: the runtime's
	// 64 MiB). It counts against the container's memory limit.
	Shm Quantity `toml:"shm"`

	// RunAsUser and RunAsGroup are the non-root identity of every container;
	// the rest of the securityContext is fixed to Pod Security "restricted".
	RunAsUser  int64 `toml:"run_as_user"`
	RunAsGroup int64 `toml:"run_as_group"`

	Allow ClassAllow `toml:"allow"`
}

// ClassAllow is what a submitter may change of a class, and within what
// bounds. What it does not name cannot be changed.
type ClassAllow struct {
	GPUs      IntRange                 `toml:"gpus"`
	Resources map[string]QuantityRange `toml:"resources"`
}

// IntRange is an inclusive range; Max 0 means "not allowed".
type IntRange struct {
	Min int `toml:"min"`
	Max int `toml:"max"`
}

// QuantityRange is an inclusive range; a zero Max means "not allowed".
type QuantityRange struct {
	Min Quantity `toml:"min"`
	Max Quantity `toml:"max"`
}

// Toleration is a corev1.Toleration in the profile's key names.
type Toleration struct {
	Key               string `toml:"key"`
	Operator          string `toml:"operator"`
	Value             string `toml:"value"`
	Effect            string `toml:"effect"`
	TolerationSeconds int64  `toml:"toleration_seconds"`
}

// NodeRequirement is a corev1.NodeSelectorRequirement.
type NodeRequirement struct {
	Key      string   `toml:"key"`
	Operator string   `toml:"operator"`
	Values   []string `toml:"values"`
}

// ClassAdjust is a cluster entry's change to a class for that spoke: its own
// GPU resource name, taints or node labels — or the class withheld there.
type ClassAdjust struct {
	Withhold      bool              `toml:"withhold"`
	GPUResource   string            `toml:"gpu_resource"`
	Tolerations   []Toleration      `toml:"tolerations"`
	NodeSelector  map[string]string `toml:"node_selector"`
	PriorityClass string            `toml:"priority_class"`
	RuntimeClass  string            `toml:"runtime_class"`
}

// Class defaults: a class that leaves them out gets a 6 h deadline (at most
// 48 h), NVIDIA's GPU resource name and the distroless nonroot identity.
// DefaultClass is the one class of a profile that defines none: enough cpu
// and memory requested that the pod is not BestEffort, the first evicted.
const (
	DefaultClassName        = "standard"
	DefaultClassDeadline    = 6 * time.Hour
	DefaultClassMaxDeadline = 48 * time.Hour
	DefaultGPUResource      = "nvidia.com/gpu"
	DefaultRunAsUser        = 65532
	DefaultRunAsGroup       = 65532
	// DefaultMaxSpills moves a pod twice at most: a third spoke tried is
	// enough to find free GPUs if any are, and each move costs a wait of
	// spill_after.
	DefaultMaxSpills = 2
	// MaxMaxSpills bounds max_spills: past ten moves a pod is only
	// circling a fleet that has no room for it.
	MaxMaxSpills       = 10
	defaultClassCPU    = "500m"
	defaultClassMemory = "1Gi"
)

// defaultClass is the class of a profile without [[pods.classes]].
func defaultClass() PodClass {
	mem := Quantity{resource.MustParse(defaultClassMemory)}
	return PodClass{
		Name:       DefaultClassName,
		DefaultFor: []string{workpod.KindLoop, workpod.KindTurn},
		Requests:   map[string]Quantity{"cpu": {resource.MustParse(defaultClassCPU)}, "memory": mem},
		Limits:     map[string]Quantity{"memory": mem},
	}
}

func setClassDefaults(p *Pods) {
	if len(p.Classes) == 0 {
		p.Classes = []PodClass{defaultClass()}
	}
	for i := range p.Classes {
		c := &p.Classes[i]
		setZero(&c.Deadline.Duration, DefaultClassDeadline)
		setZero(&c.MaxDeadline.Duration, max(DefaultClassMaxDeadline, c.Deadline.Duration))
		setZero(&c.GPUResource, DefaultGPUResource)
		setZero(&c.RunAsUser, DefaultRunAsUser)
		setZero(&c.RunAsGroup, DefaultRunAsGroup)
		if c.SpillAfter.Duration > 0 {
			setZero(&c.MaxSpills, DefaultMaxSpills)
		}
	}
}

// ClassFor returns class name ("" for kind's default) as cluster offers it:
// the class with the cluster entry's adjustments applied. The error says
// which of the two is missing, for the API's 422.
func (p *Profile) ClassFor(cluster ClusterEntry, name, kind string) (PodClass, error) {
	var class PodClass
	found := false
	for _, c := range p.Pods.Classes {
		if (name == "" && slices.Contains(c.DefaultFor, kind)) || (name != "" && c.Name == name) {
			class, found = c, true
			break
		}
	}
	switch {
	case !found && name == "":
		return PodClass{}, fmt.Errorf("no default class for kind %q", kind)
	case !found:
		return PodClass{}, fmt.Errorf("no class %q (the profile has %s)", name, classNames(p.Pods.Classes))
	}
	adj, ok := cluster.Classes[class.Name]
	if !ok {
		return class, nil
	}
	if adj.Withhold {
		return PodClass{}, fmt.Errorf("class %q is not offered on cluster %q", class.Name, cluster.Name)
	}
	return class.adjusted(adj), nil
}

// HasClass reports whether the profile has a class name (offered on some
// cluster or not).
func (p *Profile) HasClass(name string) bool {
	return slices.ContainsFunc(p.Pods.Classes, func(c PodClass) bool { return c.Name == name })
}

// OffersClass reports whether cluster offers class name.
func (c ClusterEntry) OffersClass(name string) bool { return !c.Classes[name].Withhold }

// adjusted is c with a cluster's adjustments: set values replace the
// class's; node selector labels are merged over the class's.
func (c PodClass) adjusted(a ClassAdjust) PodClass {
	setNonZero(&c.GPUResource, a.GPUResource)
	setNonZero(&c.PriorityClass, a.PriorityClass)
	setNonZero(&c.RuntimeClass, a.RuntimeClass)
	if a.Tolerations != nil {
		c.Tolerations = a.Tolerations
	}
	if len(a.NodeSelector) > 0 {
		merged := maps.Clone(c.NodeSelector)
		if merged == nil {
			merged = map[string]string{}
		}
		maps.Copy(merged, a.NodeSelector)
		c.NodeSelector = merged
	}
	return c
}

func setNonZero[T comparable](v *T, to T) {
	var zero T
	if to != zero {
		*v = to
	}
}

func classNames(classes []PodClass) string {
	names := make([]string, len(classes))
	for i, c := range classes {
		names[i] = strconv.Quote(c.Name)
	}
	return strings.Join(names, ", ")
}

func validateClasses(classes []PodClass, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	defaults := map[string]string{}
	for i := range classes {
		c := &classes[i]
		cp := path.Index(i)
		errs = append(errs, validateClass(c, cp)...)
		if seen[c.Name] {
			errs = append(errs, field.Duplicate(cp.Child("name"), c.Name))
		}
		seen[c.Name] = true
		for j, kind := range c.DefaultFor {
			kp := cp.Child("default_for").Index(j)
			switch {
			case kind != workpod.KindLoop && kind != workpod.KindTurn:
				errs = append(errs, field.NotSupported(kp, kind, []string{workpod.KindLoop, workpod.KindTurn}))
			case defaults[kind] != "":
				errs = append(errs, field.Invalid(kp, kind, fmt.Sprintf("class %q is already the default for %s", defaults[kind], kind)))
			default:
				defaults[kind] = c.Name
			}
		}
	}
	for _, kind := range []string{workpod.KindLoop, workpod.KindTurn} {
		if defaults[kind] == "" {
			errs = append(errs, field.Required(path, "no class is the default for "+kind+" (set default_for = [\""+kind+"\"] on one)"))
		}
	}
	return errs
}

func validateClass(c *PodClass, path *field.Path) field.ErrorList {
	errs := dnsLabel(path.Child("name"), c.Name)
	for i, g := range c.Groups {
		if g == "" {
			errs = append(errs, field.Required(path.Child("groups").Index(i), "a group name"))
		}
	}
	errs = append(errs, validateResources(c, path)...)
	errs = append(errs, validatePlacement(c.Tolerations, c.NodeSelector, path)...)
	for i, r := range c.NodeAffinity {
		errs = append(errs, validateNodeRequirement(r, path.Child("node_affinity").Index(i))...)
	}
	errs = append(errs, optionalSubdomain(path.Child("priority_class"), c.PriorityClass)...)
	errs = append(errs, optionalSubdomain(path.Child("runtime_class"), c.RuntimeClass)...)
	errs = append(errs, wholeSeconds(path.Child("deadline"), c.Deadline)...)
	errs = append(errs, wholeSeconds(path.Child("max_deadline"), c.MaxDeadline)...)
	if c.MaxDeadline.Duration < c.Deadline.Duration {
		errs = append(errs, field.Invalid(path.Child("max_deadline"), c.MaxDeadline.Duration, "must not be less than "+path.Child("deadline").String()))
	}
	if c.MaxPending.Duration < 0 {
		errs = append(errs, field.Invalid(path.Child("max_pending"), c.MaxPending.Duration, "must not be negative"))
	}
	errs = append(errs, validateSpill(c, path)...)
	if c.RunAsUser < 0 {
		errs = append(errs, field.Invalid(path.Child("run_as_user"), c.RunAsUser, "must be a non-root uid"))
	}
	if c.RunAsGroup < 0 {
		errs = append(errs, field.Invalid(path.Child("run_as_group"), c.RunAsGroup, "must not be negative"))
	}
	return append(errs, validateAllow(c, path.Child("allow"))...)
}

// validateSpill checks spill-over: a move must come before max_pending
// fails the pod, and max_spills means nothing without spill_after.
func validateSpill(c *PodClass, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	sp, mp := path.Child("spill_after"), path.Child("max_pending")
	switch {
	case c.SpillAfter.Duration < 0:
		errs = append(errs, field.Invalid(sp, c.SpillAfter.Duration, "must not be negative"))
	case c.SpillAfter.Duration > 0 && c.MaxPending.Duration > 0 && c.SpillAfter.Duration >= c.MaxPending.Duration:
		errs = append(errs, field.Invalid(sp, c.SpillAfter.Duration, "must be shorter than "+mp.String()+" "+c.MaxPending.String()+" (the pod would fail before it moves)"))
	}
	xp := path.Child("max_spills")
	switch {
	case c.MaxSpills < 0 || c.MaxSpills > MaxMaxSpills:
		errs = append(errs, field.Invalid(xp, c.MaxSpills, fmt.Sprintf("must be from 0 to %d", MaxMaxSpills)))
	case c.MaxSpills > 0 && c.SpillAfter.Duration <= 0:
		errs = append(errs, field.Forbidden(xp, "only with "+sp.String()))
	}
	return errs
}

// validateResources checks what the class requests: cpu and memory always
// (a pod without requests is BestEffort, evicted first), limits not below
// requests, GPUs only through gpus, and /dev/shm within the memory limit
// (its pages are charged to the container).
func validateResources(c *PodClass, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, name := range []string{"cpu", "memory"} {
		if _, ok := c.Requests[name]; !ok {
			errs = append(errs, field.Required(path.Child("requests").Child(name), "a class must request cpu and memory (without requests its pods are BestEffort, the first evicted)"))
		}
	}
	errs = append(errs, quantities(path.Child("requests"), c.Requests, c.GPUResource)...)
	errs = append(errs, quantities(path.Child("limits"), c.Limits, c.GPUResource)...)
	for _, name := range slices.Sorted(maps.Keys(c.Limits)) {
		if req, ok := c.Requests[name]; ok && c.Limits[name].Cmp(req.Quantity) < 0 {
			errs = append(errs, field.Invalid(path.Child("limits").Child(tomlKey(name)), c.Limits[name].String(), "must not be less than the request "+req.String()))
		}
	}
	if c.GPUs < 0 {
		errs = append(errs, field.Invalid(path.Child("gpus"), c.GPUs, "must not be negative"))
	}
	if len(validation.IsQualifiedName(c.GPUResource)) > 0 || !hasDomain(c.GPUResource) {
		errs = append(errs, field.Invalid(path.Child("gpu_resource"), c.GPUResource, "must be an extended resource name such as \"nvidia.com/gpu\""))
	}
	if c.Shm.Sign() < 0 {
		errs = append(errs, field.Invalid(path.Child("shm"), c.Shm.String(), "must not be negative"))
	} else if mem, ok := c.Limits["memory"]; ok && c.Shm.Cmp(mem.Quantity) > 0 {
		errs = append(errs, field.Invalid(path.Child("shm"), c.Shm.String(), "must not exceed limits.memory "+mem.String()+" (/dev/shm is charged to the container's memory)"))
	}
	return errs
}

func quantities(path *field.Path, m map[string]Quantity, gpu string) field.ErrorList {
	var errs field.ErrorList
	for _, name := range slices.Sorted(maps.Keys(m)) {
		kp := path.Child(tomlKey(name))
		switch {
		case len(validation.IsQualifiedName(name)) > 0:
			errs = append(errs, field.Invalid(kp, name, "must be a resource name such as cpu, memory, ephemeral-storage or example.com/device"))
		case name == gpu:
			errs = append(errs, field.Forbidden(kp, "set gpus instead (it sets both the request and the limit, as the device plugin requires)"))
		case m[name].Sign() < 0:
			errs = append(errs, field.Invalid(kp, m[name].String(), "must not be negative"))
		}
	}
	return errs
}

func hasDomain(name string) bool { return strings.IndexByte(name, '/') > 0 }

func validateAllow(c *PodClass, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	g := c.Allow.GPUs
	gp := path.Child("gpus")
	switch {
	case g.Min < 0 || g.Max < 0:
		errs = append(errs, field.Invalid(gp, fmt.Sprintf("%d-%d", g.Min, g.Max), "must not be negative"))
	case g.Max > 0 && g.Min > g.Max:
		errs = append(errs, field.Invalid(gp.Child("min"), g.Min, "must not exceed "+gp.Child("max").String()))
	case g.Max > 0 && (c.GPUs < g.Min || c.GPUs > g.Max):
		errs = append(errs, field.Invalid(gp, fmt.Sprintf("%d-%d", g.Min, g.Max), fmt.Sprintf("must include the class's gpus (%d)", c.GPUs)))
	case g.Max == 0 && g.Min > 0:
		errs = append(errs, field.Required(gp.Child("max"), "required with "+gp.Child("min").String()))
	}
	for _, name := range slices.Sorted(maps.Keys(c.Allow.Resources)) {
		r := c.Allow.Resources[name]
		rp := path.Child("resources").Child(tomlKey(name))
		switch {
		case len(validation.IsQualifiedName(name)) > 0:
			errs = append(errs, field.Invalid(rp, name, "must be a resource name such as cpu or memory"))
		case name == c.GPUResource:
			errs = append(errs, field.Forbidden(rp, "allow gpus instead"))
		case r.Max.Sign() <= 0:
			errs = append(errs, field.Required(rp.Child("max"), "required: the most a submitter may ask for"))
		case r.Min.Cmp(r.Max.Quantity) > 0:
			errs = append(errs, field.Invalid(rp.Child("min"), r.Min.String(), "must not exceed max "+r.Max.String()))
		}
	}
	return errs
}

func validatePlacement(tolerations []Toleration, selector map[string]string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, t := range tolerations {
		errs = append(errs, validateToleration(t, path.Child("tolerations").Index(i))...)
	}
	return append(errs, labelMap(path.Child("node_selector"), selector)...)
}

// validateToleration applies the API server's rules for a toleration, so
// that a class cannot render a pod the spoke refuses.
func validateToleration(t Toleration, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if t.Key != "" && len(validation.IsQualifiedName(t.Key)) > 0 {
		errs = append(errs, field.Invalid(path.Child("key"), t.Key, "must be a taint key (a label key)"))
	}
	switch corev1.TolerationOperator(t.Operator) {
	case "", corev1.TolerationOpEqual:
		if t.Key == "" {
			errs = append(errs, field.Required(path.Child("key"), "required unless operator is \"Exists\""))
		}
		if t.Value != "" && len(validation.IsValidLabelValue(t.Value)) > 0 {
			errs = append(errs, field.Invalid(path.Child("value"), t.Value, "must be a label value"))
		}
	case corev1.TolerationOpExists:
		if t.Value != "" {
			errs = append(errs, field.Forbidden(path.Child("value"), "must be empty with operator \"Exists\""))
		}
	default:
		errs = append(errs, field.NotSupported(path.Child("operator"), t.Operator, []string{"Equal", "Exists"}))
	}
	switch corev1.TaintEffect(t.Effect) {
	case "", corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
	default:
		errs = append(errs, field.NotSupported(path.Child("effect"), t.Effect, []string{"NoSchedule", "PreferNoSchedule", "NoExecute"}))
	}
	if t.TolerationSeconds != 0 && corev1.TaintEffect(t.Effect) != corev1.TaintEffectNoExecute {
		errs = append(errs, field.Forbidden(path.Child("toleration_seconds"), "only with effect \"NoExecute\""))
	}
	return errs
}

func validateNodeRequirement(r NodeRequirement, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(validation.IsQualifiedName(r.Key)) > 0 {
		errs = append(errs, field.Invalid(path.Child("key"), r.Key, "must be a label key"))
	}
	vp := path.Child("values")
	switch corev1.NodeSelectorOperator(r.Operator) {
	case corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn:
		if len(r.Values) == 0 {
			errs = append(errs, field.Required(vp, "required with operator "+r.Operator))
		}
	case corev1.NodeSelectorOpExists, corev1.NodeSelectorOpDoesNotExist:
		if len(r.Values) > 0 {
			errs = append(errs, field.Forbidden(vp, "must be empty with operator "+r.Operator))
		}
	case corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt:
		if len(r.Values) != 1 {
			errs = append(errs, field.Invalid(vp, r.Values, "must be one integer with operator "+r.Operator))
		}
	default:
		errs = append(errs, field.NotSupported(path.Child("operator"), r.Operator, []string{"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"}))
	}
	for i, v := range r.Values {
		if len(validation.IsValidLabelValue(v)) > 0 {
			errs = append(errs, field.Invalid(vp.Index(i), v, "must be a label value"))
		}
	}
	return errs
}

// labelMap checks a node selector: label keys and values.
func labelMap(path *field.Path, m map[string]string) field.ErrorList {
	var errs field.ErrorList
	for _, k := range slices.Sorted(maps.Keys(m)) {
		kp := path.Child(tomlKey(k))
		if len(validation.IsQualifiedName(k)) > 0 {
			errs = append(errs, field.Invalid(kp, k, "key must be a label key (an optional DNS-subdomain prefix and '/', then at most 63 of alphanumerics, '-', '_', '.')"))
		}
		if v := m[k]; len(validation.IsValidLabelValue(v)) > 0 {
			errs = append(errs, field.Invalid(kp, v, "must be a label value (at most 63 of alphanumerics, '-', '_', '.', beginning and ending alphanumeric)"))
		}
	}
	return errs
}

func optionalSubdomain(path *field.Path, v string) field.ErrorList {
	if v != "" && len(validation.IsDNS1123Subdomain(v)) > 0 {
		return field.ErrorList{field.Invalid(path, v, "must be a DNS subdomain (the name of the spoke's object)")}
	}
	return nil
}

func wholeSeconds(path *field.Path, d Duration) field.ErrorList {
	switch {
	case d.Duration <= 0:
		return field.ErrorList{field.Invalid(path, d.Duration, "must be positive")}
	case d.Duration%time.Second != 0:
		return field.ErrorList{field.Invalid(path, d.Duration, "must be whole seconds")}
	}
	return nil
}

// validateClusterClasses checks a cluster entry's adjustments: each names a
// class of the profile, and the defaults stay offered (a submission that
// names no class must work on every cluster).
func validateClusterClasses(c *ClusterEntry, classes []PodClass, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, name := range slices.Sorted(maps.Keys(c.Classes)) {
		a := c.Classes[name]
		ap := path.Child("classes").Child(tomlKey(name))
		i := slices.IndexFunc(classes, func(pc PodClass) bool { return pc.Name == name })
		if i < 0 {
			errs = append(errs, withDetail(field.NotFound(ap, name), "no such class in [[pods.classes]]"))
			continue
		}
		if a.Withhold && len(classes[i].DefaultFor) > 0 {
			errs = append(errs, field.Forbidden(ap.Child("withhold"), fmt.Sprintf("class %q is the default for %s and must be offered on every cluster", name, strings.Join(classes[i].DefaultFor, " and "))))
		}
		if a.GPUResource != "" && (len(validation.IsQualifiedName(a.GPUResource)) > 0 || !hasDomain(a.GPUResource)) {
			errs = append(errs, field.Invalid(ap.Child("gpu_resource"), a.GPUResource, "must be an extended resource name such as \"nvidia.com/gpu\""))
		}
		errs = append(errs, validatePlacement(a.Tolerations, a.NodeSelector, ap)...)
		errs = append(errs, optionalSubdomain(ap.Child("priority_class"), a.PriorityClass)...)
		errs = append(errs, optionalSubdomain(ap.Child("runtime_class"), a.RuntimeClass)...)
	}
	return errs
}

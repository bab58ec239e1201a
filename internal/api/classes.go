package api

import (
	"maps"
	"net/http"
	"slices"
	"strconv"

	"crucible.dev/crucible/internal/apiauth"
	"crucible.dev/crucible/internal/podclass"
	"crucible.dev/crucible/internal/profile"
)

// Class is a pod class as GET /api/classes shows it: what a pod of it gets
// and what a submitter may change, so that the CLI and the web UI can offer
// exactly the asks the submit will accept.
type Class struct {
	Name       string            `json:"name"`
	DefaultFor []string          `json:"default_for,omitempty"`
	Requests   map[string]string `json:"requests"`
	Limits     map[string]string `json:"limits,omitempty"`
	GPUs       int               `json:"gpus"`
	// GPUResource is the cluster's name for a GPU (its device plugin's).
	GPUResource string `json:"gpu_resource"`
	Deadline    string `json:"deadline"`
	MaxDeadline string `json:"max_deadline"`
	Shm         string `json:"shm,omitempty"`
	Allow       Allow  `json:"allow"`
}

// Allow is what a submitter may change of a class: GPUs within [min, max]
// when max > 0, each named resource within its range, the deadline up to
// the class's max_deadline.
type Allow struct {
	GPUs      *Range           `json:"gpus,omitempty"`
	Resources map[string]Range `json:"resources,omitempty"`
}

// Range is an inclusive bound; an empty Min is no lower bound.
type Range struct {
	Min string `json:"min,omitempty"`
	Max string `json:"max"`
}

// ClusterClasses are the classes a caller may submit with on one cluster.
type ClusterClasses struct {
	Cluster string  `json:"cluster"`
	Classes []Class `json:"classes"`
}

// classes answers GET /api/classes: per cluster the caller may create work
// pods on, the classes that cluster offers (with its adjustments) whose
// groups admit the caller. A permission that cannot be checked now is a
// 503, never a shorter list.
func (s *Server) classes(w http.ResponseWriter, r *http.Request) error {
	id, p := identity(r), s.profile()
	asks := make([]apiauth.Attributes, len(p.Clusters))
	for i, c := range p.Clusters {
		asks[i] = apiauth.Attributes{Verb: apiauth.VerbCreate, Cluster: c.Name}
	}
	creatable, err := s.permitted(r.Context(), id, asks)
	if err != nil {
		return err
	}
	out := []ClusterClasses{}
	for i, c := range p.Clusters {
		if creatable[i] {
			out = append(out, ClusterClasses{Cluster: c.Name, Classes: offered(p, c, id.Groups)})
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// offered are the classes cluster c offers to a caller in groups.
func offered(p *profile.Profile, c profile.ClusterEntry, groups []string) []Class {
	out := []Class{}
	for _, pc := range p.Pods.Classes {
		class, err := p.ClassFor(c, pc.Name, "")
		if err != nil || !podclass.Allows(class, groups) {
			continue // withheld here, or not the caller's
		}
		out = append(out, classView(class))
	}
	return out
}

func classView(c profile.PodClass) Class {
	v := Class{
		Name: c.Name, DefaultFor: c.DefaultFor, Requests: quantities(c.Requests), Limits: quantities(c.Limits),
		GPUs: c.GPUs, GPUResource: c.GPUResource, Deadline: c.Deadline.String(), MaxDeadline: c.MaxDeadline.String(),
	}
	if c.Shm.Sign() > 0 {
		v.Shm = c.Shm.String()
	}
	if g := c.Allow.GPUs; g.Max > 0 {
		v.Allow.GPUs = &Range{Min: strconv.Itoa(g.Min), Max: strconv.Itoa(g.Max)}
	}
	for _, name := range slices.Sorted(maps.Keys(c.Allow.Resources)) {
		b := c.Allow.Resources[name]
		if v.Allow.Resources == nil {
			v.Allow.Resources = map[string]Range{}
		}
		r := Range{Max: b.Max.String()}
		if b.Min.Sign() > 0 {
			r.Min = b.Min.String()
		}
		v.Allow.Resources[name] = r
	}
	return v
}

func quantities(m map[string]profile.Quantity) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, q := range m {
		out[k] = q.String()
	}
	return out
}

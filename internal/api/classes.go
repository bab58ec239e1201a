package api

import (
	"maps"
	"net/http"
	"slices"
	"strconv"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/apiauth"
	"crucible.dev/crucible/internal/podclass"
	"crucible.dev/crucible/internal/profile"
)

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
	out := []apiv1.ClusterClasses{}
	for i, c := range p.Clusters {
		if creatable[i] {
			out = append(out, apiv1.ClusterClasses{Cluster: c.Name, Classes: offered(p, c, id.Groups)})
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// offered are the classes cluster c offers to a caller in groups.
func offered(p *profile.Profile, c profile.ClusterEntry, groups []string) []apiv1.Class {
	out := []apiv1.Class{}
	for _, pc := range p.Pods.Classes {
		class, err := p.ClassFor(c, pc.Name, "")
		if err != nil || !podclass.Allows(class, groups) {
			continue // withheld here, or not the caller's
		}
		out = append(out, classView(class))
	}
	return out
}

func classView(c profile.PodClass) apiv1.Class {
	v := apiv1.Class{
		Name: c.Name, DefaultFor: c.DefaultFor, Requests: quantities(c.Requests), Limits: quantities(c.Limits),
		GPUs: c.GPUs, GPUResource: c.GPUResource, Deadline: c.Deadline.String(), MaxDeadline: c.MaxDeadline.String(),
	}
	if c.Shm.Sign() > 0 {
		v.Shm = c.Shm.String()
	}
	if g := c.Allow.GPUs; g.Max > 0 {
		v.Allow.GPUs = &apiv1.Range{Min: strconv.Itoa(g.Min), Max: strconv.Itoa(g.Max)}
	}
	for _, name := range slices.Sorted(maps.Keys(c.Allow.Resources)) {
		b := c.Allow.Resources[name]
		if v.Allow.Resources == nil {
			v.Allow.Resources = map[string]apiv1.Range{}
		}
		r := apiv1.Range{Max: b.Max.String()}
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

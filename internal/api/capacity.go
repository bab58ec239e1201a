package api

import (
	"net/http"

	"k8s.io/apimachinery/pkg/api/resource"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/capacity"
	"crucible.dev/crucible/internal/httperr"
	"crucible.dev/crucible/internal/profile"
)

// capacityView answers GET /api/capacity[?class=C]: every cluster of the
// profile with its capacity view (GPUs per product, CPU and memory free
// and allocatable) and, with ?class, whether a pod of the class with its
// default asks fits there now and why not — what placement would judge.
func (s *Server) capacityView(w http.ResponseWriter, r *http.Request) error {
	p := s.profile()
	class := r.URL.Query().Get("class")
	if class != "" && !p.HasClass(class) {
		return &httperr.Error{Code: http.StatusBadRequest, Field: "class", Msg: "class " + quoteTruncated(class) + ": no such class"}
	}
	out := make([]apiv1.ClusterCapacity, 0, len(p.Clusters))
	for _, c := range p.Clusters {
		cc := apiv1.ClusterCapacity{Cluster: c.Name}
		if sum, ok := s.Capacity.Summary(c.Name); ok {
			cc.View, cc.Synced = true, sum.Synced
			if sum.Synced {
				fillCapacity(&cc, sum)
			}
		}
		out = append(out, cc)
	}
	if class != "" {
		s.judgeClass(r, p, class, out)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func fillCapacity(cc *apiv1.ClusterCapacity, sum capacity.Summary) {
	for _, g := range sum.GPUs {
		cc.GPUs = append(cc.GPUs, apiv1.GPUProduct{Product: g.Product, Free: g.Free, Total: g.Total})
	}
	cc.CPU = &apiv1.Amount{
		Free:  resource.NewMilliQuantity(sum.CPUMillis.Free, resource.DecimalSI).String(),
		Total: resource.NewMilliQuantity(sum.CPUMillis.Total, resource.DecimalSI).String(),
	}
	cc.Memory = &apiv1.Amount{
		Free:  resource.NewQuantity(sum.MemoryBytes.Free, resource.BinarySI).String(),
		Total: resource.NewQuantity(sum.MemoryBytes.Total, resource.BinarySI).String(),
	}
}

// CapacityHistory is the spokes' GPU occupancy over the last hour
// (capacity.Fleet.History); ok is false for a cluster without a view.
type CapacityHistory interface {
	History(cluster string) (series []capacity.Series, ok bool)
}

var _ CapacityHistory = (*capacity.Fleet)(nil)

// noHistory is a fleet without capacity views.
type noHistory struct{}

func (noHistory) History(string) ([]capacity.Series, bool) { return nil, false }

// capacityHistory answers GET /api/capacity/history[?cluster=C]: per
// cluster of the profile (or C alone), its GPUs' samples per product.
func (s *Server) capacityHistory(w http.ResponseWriter, r *http.Request) error {
	p := s.profile()
	only := r.URL.Query().Get("cluster")
	if _, ok := p.Cluster(only); only != "" && !ok {
		return &httperr.Error{Code: http.StatusBadRequest, Field: "cluster", Msg: "cluster " + quoteTruncated(only) + ": no such cluster"}
	}
	out := make([]apiv1.ClusterHistory, 0, len(p.Clusters))
	for _, c := range p.Clusters {
		if only != "" && c.Name != only {
			continue
		}
		series, ok := s.CapacityHistory.History(c.Name)
		out = append(out, apiv1.ClusterHistory{Cluster: c.Name, View: ok, GPUs: gpuSeries(series)})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func gpuSeries(series []capacity.Series) []apiv1.GPUSeries {
	var out []apiv1.GPUSeries
	for _, sr := range series {
		g := apiv1.GPUSeries{Product: sr.Product, Samples: make([]apiv1.GPUSample, len(sr.Samples))}
		for i, x := range sr.Samples {
			g.Samples[i] = apiv1.GPUSample{Time: x.Time, Used: x.Used, Total: x.Total}
		}
		out = append(out, g)
	}
	return out
}

// judgeClass fills each cluster's Fits and Reason (out in profile order)
// for a pod of class with its default asks, as placement would judge it:
// not offered there, or the view's verdict. Without a synced view it says
// nothing; a pod that cannot be judged anywhere says why on every cluster.
func (s *Server) judgeClass(r *http.Request, p *profile.Profile, class string, out []apiv1.ClusterCapacity) {
	req := apiv1.SubmitRequest{Class: class, Image: capacityProbeImage}
	candidates, valids, _, err := s.candidates(r, p, req, capacityProbeID)
	for i, c := range p.Clusters {
		cc := &out[i]
		if err != nil {
			cc.Reason = "cannot judge: " + httperr.Truncate(err.Error(), 200)
			continue
		}
		if candidates[i].Excluded != "" {
			no := false
			cc.Fits, cc.Reason = &no, candidates[i].Excluded
			continue
		}
		pod, perr := podOn(p, c, valids[i])
		if perr != nil {
			cc.Reason = "cannot judge: " + httperr.Truncate(perr.Error(), 200)
			continue
		}
		if v, ok := s.Capacity.Judge(c.Name, pod); ok {
			cc.Fits, cc.Reason = &v.Fits, v.Reason
		}
	}
}

// capacityProbeImage is the image of the pod GET /api/capacity?class=C
// judges: never created, it only has to pass the submit's checks.
const (
	capacityProbeImage = "registry.k8s.io/pause:3.10"
	capacityProbeID    = "capacity-probe"
)

func quoteTruncated(s string) string { return `"` + httperr.Truncate(s, 100) + `"` }

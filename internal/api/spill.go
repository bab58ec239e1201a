package api

import (
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"crucible.dev/crucible/internal/dispatch"
	"crucible.dev/crucible/internal/metrics"
	"crucible.dev/crucible/internal/placement"
	"crucible.dev/crucible/internal/podclass"
	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/store"
	"crucible.dev/crucible/internal/workpod"
)

// ErrSecretFiles: a pod with secret files cannot move; the store keeps
// only their digests, and a new spoke needs their values.
var ErrSecretFiles = errors.New("its secret files are not stored, so it cannot be created anywhere else")

// Replace places a spilled pod again (R-PL3): row, placed, never started,
// leaves its cluster. The candidates are the row's eligible spokes (those
// its submit was authorized for and whose class was offered) that it has
// not tried, judged now as a submit's are; a spoke where it would only
// wait again is no move, so nothing fitting now is a *placement.NoFitError
// and the pod stays. The chosen spoke's capacity is reserved for the pod.
// The move's Reason is the caller's to set; its From and PodUID are row's.
func (s *Server) Replace(ctx context.Context, row store.WorkPod) (store.Move, workpod.Valid, error) {
	if row.Placement == nil {
		return store.Move{}, workpod.Valid{}, fmt.Errorf("work pod %s: its submitter named its cluster; it never moves", row.ID)
	}
	wp, secrets, err := workpod.DecodeStored(row.Spec)
	switch {
	case err != nil:
		return store.Move{}, workpod.Valid{}, fmt.Errorf("work pod %s: %w", row.ID, err)
	case len(secrets) > 0:
		return store.Move{}, workpod.Valid{}, fmt.Errorf("work pod %s: %w", row.ID, ErrSecretFiles)
	}
	accepted, errs := workpod.Check(wp)
	if len(errs) > 0 {
		return store.Move{}, workpod.Valid{}, fmt.Errorf("work pod %s: its stored spec is not valid: %w", row.ID, errs.ToAggregate())
	}
	p := s.profile()
	req := placement.Request{Tried: append(slices.Clone(row.Placement.Tried), row.Cluster), Strict: true}
	if row.Placement.Ordered {
		req.Preference = slices.DeleteFunc(slices.Clone(row.Placement.Eligible), func(name string) bool { _, ok := p.Cluster(name); return !ok })
	}
	candidates := make([]placement.Candidate, len(p.Clusters))
	valids := make([]workpod.Valid, len(p.Clusters))
	pods := make([]*corev1.Pod, len(p.Clusters))
	for i, c := range p.Clusters {
		candidates[i] = placement.Candidate{Cluster: c.Name}
		if !slices.Contains(row.Placement.Eligible, c.Name) {
			candidates[i].Excluded = "not eligible when submitted"
			continue
		}
		if candidates[i].Excluded = s.spokeExcluded(c.Name); candidates[i].Excluded != "" || slices.Contains(req.Tried, c.Name) {
			continue
		}
		v, err := shapeOn(p, c, accepted)
		if err != nil {
			candidates[i].Excluded = exclusion(err)
			continue
		}
		if pods[i], err = podOn(p, c, v); err != nil {
			return store.Move{}, workpod.Valid{}, err
		}
		valids[i] = v
	}
	digestKey, err := s.digestKey(ctx)
	if err != nil {
		return store.Move{}, workpod.Valid{}, err
	}
	i, record, err := s.decide(req, candidates, pods)
	if err != nil {
		return store.Move{}, workpod.Valid{}, err
	}
	record.Eligible, record.Ordered, record.Tried = row.Placement.Eligible, row.Placement.Ordered, req.Tried
	spec, err := workpod.EncodeStored(valids[i].Pod(), digestKey)
	if err != nil {
		s.Capacity.Release(p.Clusters[i].Name, pods[i].Namespace, pods[i].Name)
		return store.Move{}, workpod.Valid{}, err
	}
	return store.Move{From: row.Cluster, PodUID: row.PodUID, To: p.Clusters[i].Name, Namespace: p.Clusters[i].LoopNamespace,
		Spec: spec, Placement: record}, valids[i], nil
}

// shapeOn is the accepted pod as spoke c offers its class: c's
// tolerations, node selector, affinity, priority and runtime class, and
// the resources, deadline and limits the pod was accepted with (the
// submitter's ask is not kept; what was granted for it is).
func shapeOn(p *profile.Profile, c profile.ClusterEntry, accepted workpod.Valid) (workpod.Valid, error) {
	was := accepted.Pod().Shape
	class, err := p.ClassFor(c, was.Class, "")
	if err != nil {
		return workpod.Valid{}, err
	}
	shape, errs := podclass.Resolve(class, p.Pods.NodeSelector, podclass.Ask{})
	if len(errs) > 0 {
		return workpod.Valid{}, errs.ToAggregate()
	}
	shape.Resources, shape.DeadlineSeconds, shape.Shm = was.Resources, was.DeadlineSeconds, was.Shm
	shape.MaxPendingSeconds, shape.SpillAfterSeconds, shape.MaxSpills = was.MaxPendingSeconds, was.SpillAfterSeconds, was.MaxSpills
	return reshape(accepted, shape)
}

// spillRefused moves sub's row, placed, whose create its spoke refused for
// quota (dispatch.QuotaExceeded), to another spoke at once (R-PL3): nothing
// was created, so nothing is deleted. It moves as a spill-over does —
// only a placed pod, at most its class's max_spills times, among the
// spokes eligible at submit — and reports false when the pod cannot move
// (the caller fails the row with the refusal).
func (s *Server) spillRefused(ctx context.Context, sub submission, refusal error) (submission, bool) {
	row := sub.row
	if row.Placement == nil || len(row.Placement.Tried) >= sub.pod.Pod().Shape.MaxSpills {
		return sub, false
	}
	move, valid, err := s.Replace(ctx, row)
	if err != nil {
		s.Log.Info("a placed pod refused for quota cannot move", "cluster", row.Cluster, "pod", row.ID, "error", err)
		return sub, false
	}
	move.Reason = "create refused for capacity: " + dispatch.PublicMessage(refusal)
	moved, err := s.Store.MoveWorkPod(ctx, row.ID, move)
	if err != nil {
		s.Capacity.Release(move.To, move.Namespace, row.ID)
		s.Log.Error("moving a placed pod refused for quota failed", "cluster", row.Cluster, "pod", row.ID, "error", err)
		return sub, false
	}
	s.Capacity.Release(row.Cluster, row.Namespace, row.ID) // never created there
	metrics.Spills.WithLabelValues(row.Cluster, "moved").Inc()
	s.Log.Info("moved a placed pod its spoke refused for quota", "from", row.Cluster, "to", move.To, "pod", row.ID)
	sub.row, sub.pod = moved, valid
	return sub, true
}

package api

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/apiauth"
	"crucible.dev/crucible/internal/capacity"
	"crucible.dev/crucible/internal/httperr"
	"crucible.dev/crucible/internal/placement"
	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/render"
	"crucible.dev/crucible/internal/store"
	"crucible.dev/crucible/internal/workpod"
)

// Capacity is the spokes' capacity views (*capacity.Fleet): placement
// judges a pod against them and counts the pods it sends until their
// spoke's watch shows them; GET /api/capacity shows them.
type Capacity interface {
	// Judge says whether some node of cluster takes pod now; ok is false
	// when cluster has no synced view.
	Judge(cluster string, pod *corev1.Pod) (v capacity.Verdict, ok bool)
	// Reserve counts pod, about to be sent to cluster, against its view
	// until its watch shows it; Release stops counting it.
	Reserve(cluster string, pod *corev1.Pod)
	Release(cluster, namespace, name string)
	// ReserveUntil counts a pod another replica placed until the view
	// sees it bound, or until.
	ReserveUntil(cluster string, pod *corev1.Pod, until time.Time)
	// Summary is cluster's view for display; ok is false without one.
	Summary(cluster string) (s capacity.Summary, ok bool)
}

// noCapacity is a fleet without capacity views: placement goes by profile
// order and spill-over alone.
type noCapacity struct{}

func (noCapacity) Judge(string, *corev1.Pod) (capacity.Verdict, bool) {
	return capacity.Verdict{}, false
}
func (noCapacity) Reserve(string, *corev1.Pod)                 {}
func (noCapacity) Release(string, string, string)              {}
func (noCapacity) ReserveUntil(string, *corev1.Pod, time.Time) {}
func (noCapacity) Summary(string) (capacity.Summary, bool)     { return capacity.Summary{}, false }

// wantsPlacement reports whether the submitter lets the controller choose
// the cluster: "auto", a preference list, or nothing named where the
// profile's default is "auto".
func wantsPlacement(p *profile.Profile, req apiv1.SubmitRequest) bool {
	return req.Cluster == apiv1.ClusterAuto || len(req.Clusters) > 0 ||
		(req.Cluster == "" && p.DefaultCluster == profile.AutoCluster)
}

// placed is a placement decided: the cluster, the decision as the row
// keeps it, and the pod checked and shaped as the chosen cluster runs it
// (valid), rendered (pod) and reserved there.
type placed struct {
	cluster profile.ClusterEntry
	record  *store.Placement
	valid   workpod.Valid
	pod     *corev1.Pod
}

// place chooses req's cluster among the profile's (package placement):
// every spoke's candidacy — the caller may create there, the spoke is
// healthy and not draining, the class is offered, and with a capacity
// view whether a node takes the pod now. 403 when the caller may create
// nowhere (nothing about the clusters is said), 400 for a preference
// naming no cluster, 409 with every spoke's reason when no spoke can take
// the pod (or, strict, none fits it now). req passed CheckPlacement.
//
// id is the work pod's: the chosen spoke's capacity is reserved for the
// pod of that name. The pod is checked once; each spoke only shapes it.
func (s *Server) place(r *http.Request, p *profile.Profile, req apiv1.SubmitRequest, id string) (placed, error) {
	for _, name := range req.Clusters {
		if _, ok := p.Cluster(name); !ok {
			return placed{}, &httperr.Error{Code: http.StatusBadRequest, Field: "clusters",
				Msg: fmt.Sprintf("clusters: %q: no such cluster (known: %s)", httperr.Truncate(name, 100), strings.Join(clusterNames(p), ", "))}
		}
	}
	if req.Class != "" && !p.HasClass(req.Class) {
		// Wrong wherever it goes: the submit's 422, not placement's 409.
		_, err := p.ClassFor(profile.ClusterEntry{}, req.Class, "")
		return placed{}, &httperr.Error{Code: http.StatusUnprocessableEntity, Field: "class", Msg: httperr.Truncate(err.Error(), maxMessageBytes)}
	}
	candidates, valids, allowed, err := s.candidates(r, p, req, id)
	if err != nil {
		return placed{}, err
	}
	if allowed == 0 {
		return placed{}, httperr.New(http.StatusForbidden, "you may not create work pods on any cluster")
	}
	pods := make([]*corev1.Pod, len(p.Clusters))
	for i, c := range p.Clusters {
		if !valids[i].IsZero() {
			pod, err := podOn(p, c, valids[i])
			if err != nil {
				return placed{}, err
			}
			pods[i] = pod
		}
	}
	// The other replicas' placements so far count too, read from their
	// rows just before deciding (the controller also reads them every
	// second, for GET /api/capacity).
	if err := s.CountPlacements(r.Context()); err != nil {
		s.Log.Warn("placing without the other replicas' latest placements", "error", err)
	}
	preq := placement.Request{Preference: req.Clusters, Strict: req.Placement == apiv1.PlacementStrict}
	i, record, err := s.decide(preq, candidates, pods)
	if nofit, ok := errors.AsType[*placement.NoFitError](err); ok {
		return placed{}, &httperr.Error{Code: http.StatusConflict, Field: "cluster", Msg: httperr.Truncate(nofit.Error(), maxMessageBytes)}
	}
	if err != nil {
		return placed{}, err
	}
	record.Eligible, record.Ordered = eligible(preq, candidates), len(req.Clusters) > 0
	return placed{cluster: p.Clusters[i], record: record, valid: valids[i], pod: pods[i]}, nil
}

// eligible are the spokes a spill-over may move the pod to: the ones not
// excluded at submit (the caller may create there, the class is offered),
// in the preference list's order when there is one, else profile order.
func eligible(req placement.Request, candidates []placement.Candidate) []string {
	var names []string
	ok := func(c placement.Candidate) bool { return c.Excluded == "" }
	if len(req.Preference) > 0 {
		for _, name := range req.Preference {
			if i := slices.IndexFunc(candidates, func(c placement.Candidate) bool { return c.Cluster == name }); i >= 0 && ok(candidates[i]) {
				names = append(names, name)
			}
		}
		return names
	}
	for _, c := range candidates {
		if ok(c) {
			names = append(names, c.Cluster)
		}
	}
	return names
}

// candidates is every spoke's candidacy for req, in profile order, and
// the pod, checked once (id its work pod's id), as each spoke that is not
// excluded shapes it (the zero Valid where it is); allowed counts the
// spokes the caller may create on. What is wrong past the class is wrong
// on every spoke: the request's own 400 or 422, an error here.
func (s *Server) candidates(r *http.Request, p *profile.Profile, req apiv1.SubmitRequest, id string) ([]placement.Candidate, []workpod.Valid, int, error) {
	candidates := make([]placement.Candidate, len(p.Clusters))
	valids := make([]workpod.Valid, len(p.Clusters))
	allowed := 0
	var checked workpod.Valid
	for i, c := range p.Clusters {
		cand, shape, err := s.candidate(r, p, c, req)
		if err != nil {
			return nil, nil, 0, err
		}
		if cand.Excluded != excludedForbidden {
			allowed++
		}
		candidates[i] = cand
		if cand.Excluded != "" {
			continue
		}
		if checked.IsZero() {
			checked, err = checkPod(p, req, shape, id)
		} else {
			checked, err = reshape(checked, shape)
		}
		if err != nil {
			return nil, nil, 0, err
		}
		valids[i] = checked
	}
	return candidates, valids, allowed, nil
}

// reshape is the checked pod with another spoke's shape.
func reshape(v workpod.Valid, shape workpod.Shape) (workpod.Valid, error) {
	w, errs := v.WithShape(shape)
	if len(errs) > 0 {
		return workpod.Valid{}, badRequest(errs)
	}
	return w, nil
}

// podOn is v as c would run it: what a capacity view judges.
func podOn(p *profile.Profile, c profile.ClusterEntry, v workpod.Valid) (*corev1.Pod, error) {
	objs, err := render.Turn(c, p.Pods, "placement", v)
	if err != nil {
		return nil, fmt.Errorf("render the pod for %s: %w", c.Name, err)
	}
	objs.Pod.Name, objs.Pod.Namespace = v.Pod().ID, c.LoopNamespace
	return objs.Pod, nil
}

// decide judges the candidates' pods against their views, decides, and
// reserves the chosen spoke's capacity for the pod, as one step: two
// submits placed at once must not both see the last free GPU. The caller
// releases the reservation (release) if the pod is not sent. chosen is
// the chosen candidate's index; a pod nowhere to go is Decide's
// *placement.NoFitError.
func (s *Server) decide(req placement.Request, candidates []placement.Candidate, pods []*corev1.Pod) (chosen int, record *store.Placement, err error) {
	s.placing.Lock()
	defer s.placing.Unlock()
	for i, pod := range pods {
		if pod == nil {
			continue
		}
		if v, ok := s.Capacity.Judge(candidates[i].Cluster, pod); ok {
			c := &candidates[i]
			c.View, c.Fits, c.Reason = true, v.Fits, v.Reason
			c.Resource, c.Free, c.Total, c.Queued = string(v.Resource), v.Free, v.Total, v.Queued
		}
	}
	d, err := placement.Decide(req, candidates)
	if err != nil {
		return 0, nil, err
	}
	chosen = slices.IndexFunc(candidates, func(c placement.Candidate) bool { return c.Cluster == d.Cluster })
	s.Capacity.Reserve(d.Cluster, pods[chosen])
	s.markCounted(pods[chosen].Name, time.Now().Add(capacity.ReserveTTL))
	return chosen, &store.Placement{Decision: d.String(), Waits: d.Waits}, nil
}

// release ends the reservation of a placement whose pod will not be sent
// (its row refused, its dispatch failed, a replay). A pod sent keeps it
// until the view's watch shows the pod bound, and counts from then on.
func (s *Server) release(pl placed) {
	if pl.pod != nil {
		s.Capacity.Release(pl.cluster.Name, pl.pod.Namespace, pl.pod.Name)
	}
}

// excludedForbidden is the reason of a spoke the caller may not create on.
const excludedForbidden = "may not create pods"

// candidate is one spoke's candidacy for req, and the pod's shape there
// when it is not excluded. An error is not about the spoke: the
// authorizer unavailable.
func (s *Server) candidate(r *http.Request, p *profile.Profile, c profile.ClusterEntry, req apiv1.SubmitRequest) (placement.Candidate, workpod.Shape, error) {
	cand := placement.Candidate{Cluster: c.Name}
	if err := s.Authz.Authorize(r.Context(), identity(r), apiauth.Attributes{Verb: apiauth.VerbCreate, Cluster: c.Name}); err != nil {
		if !errors.Is(err, apiauth.ErrForbidden) {
			return cand, workpod.Shape{}, authError(err)
		}
		cand.Excluded = excludedForbidden
		return cand, workpod.Shape{}, nil
	}
	if cand.Excluded = s.spokeExcluded(c.Name); cand.Excluded != "" {
		return cand, workpod.Shape{}, nil
	}
	shape, err := shapeFor(p, c, req, identity(r).Groups)
	if err != nil {
		cand.Excluded = exclusion(err)
	}
	return cand, shape, nil
}

// spokeExcluded is why spoke cannot take a pod now whatever the pod:
// draining, or unreachable by its last health check; "" if it can.
func (s *Server) spokeExcluded(spoke string) string {
	if s.Clients.Draining(spoke) {
		return "draining"
	}
	if client, ok := s.Clients.Get(spoke); ok {
		if h := client.Health(); !h.CheckedAt.IsZero() && !h.Reachable {
			return "unreachable"
		}
	}
	return ""
}

// exclusion words why a spoke cannot run the request at all: the class
// not offered there, beyond its bounds there, or not the caller's.
func exclusion(err error) string {
	var he *httperr.Error
	if errors.As(err, &he) {
		return httperr.Truncate(he.Msg, 200)
	}
	return httperr.Truncate(err.Error(), 200)
}

func clusterNames(p *profile.Profile) []string {
	names := make([]string, 0, len(p.Clusters))
	for _, c := range p.Clusters {
		names = append(names, c.Name)
	}
	return names
}

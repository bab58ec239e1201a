package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/apiauth"
	"crucible.dev/crucible/internal/dispatch"
	"crucible.dev/crucible/internal/httperr"
	"crucible.dev/crucible/internal/podclass"
	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/store"
	"crucible.dev/crucible/internal/workpod"
)

// submission is a submit decided: the work pod to dispatch and the pending
// row that records it.
type submission struct {
	pod workpod.Valid
	row store.WorkPod
	// request is the canonical JSON row.RequestSHA256 digests (with an
	// Idempotency-Key), digestKey the key it and the secret files are
	// digested under: a replay compares its own request with the row's.
	request   []byte
	digestKey []byte
}

// newSubmission decides a submit without doing anything: the kind's
// default, the target cluster, the pod's shape from its class (podclass:
// 422 beyond the class's bounds or where the cluster withholds it, 403 for
// a caller outside its groups), validation (workpod.Check, the only one a
// work pod gets), the profile's allowlist of annotation prefixes (422: the
// key is well-formed but not the submitter's to set), the spec as stored
// and, with an Idempotency-Key, the request's digest. id makes the work
// pod's id from a prefix. An error names the field at fault.
func newSubmission(p *profile.Profile, req apiv1.SubmitRequest, caller apiauth.Identity, key string, digestKey []byte, id func(prefix string) string) (submission, error) {
	if req.Kind == "" {
		req.Kind = workpod.DefaultKind
	}
	cluster, ok := p.Cluster(req.Cluster)
	if !ok {
		return submission{}, &httperr.Error{Code: http.StatusBadRequest, Field: "cluster",
			Msg: fmt.Sprintf("cluster %q: no such cluster (known: %s)", httperr.Truncate(req.Cluster, 100), strings.Join(clusterNames(p), ", "))}
	}
	shape, err := shapeFor(p, cluster, req, caller.Groups)
	if err != nil {
		return submission{}, err
	}
	valid, err := checkPod(p, req, shape, id(idPrefix(req.Kind)))
	if err != nil {
		return submission{}, err
	}
	// Digested as dispatched: the default kind and cluster filled in, so a
	// retry that names them matches one that left them out.
	req.Cluster = cluster.Name
	return submissionFor(valid, cluster, caller, key, digestKey, req)
}

// checkPod is req's work pod with shape and id, checked (workpod.Check,
// the only check a work pod gets: 400), with annotation keys from the
// profile's allowlist (422: well-formed, but not the submitter's to set).
func checkPod(p *profile.Profile, req apiv1.SubmitRequest, shape workpod.Shape, id string) (workpod.Valid, error) {
	if req.Kind == "" {
		req.Kind = workpod.DefaultKind
	}
	wp := workpod.WorkPod{
		ID: id, Kind: req.Kind, Image: req.Image, Command: req.Command, Args: req.Args, Env: req.Env,
		Files: req.Files, SecretFiles: req.SecretFiles, Annotations: req.Annotations, Shape: shape,
	}
	valid, errs := workpod.Check(wp)
	if len(errs) > 0 {
		return workpod.Valid{}, badRequest(errs)
	}
	if errs := workpod.CheckMetadataKeys(wp, p.Pods.MetadataPrefixes); len(errs) > 0 {
		return workpod.Valid{}, &httperr.Error{Code: http.StatusUnprocessableEntity, Field: errs[0].Field, Msg: httperr.Truncate(errs.ToAggregate().Error(), maxMessageBytes)}
	}
	return valid, nil
}

// submissionFor is the submission of valid to cluster: its pending row,
// the spec as stored and, with an Idempotency-Key, the digest of asked —
// the request as the submitter's retry will repeat it.
func submissionFor(valid workpod.Valid, cluster profile.ClusterEntry, caller apiauth.Identity, key string, digestKey []byte, asked apiv1.SubmitRequest) (submission, error) {
	wp := valid.Pod()
	spec, err := workpod.EncodeStored(wp, digestKey)
	if err != nil {
		return submission{}, err
	}
	row := store.WorkPod{ID: wp.ID, Cluster: cluster.Name, Namespace: cluster.LoopNamespace, Kind: wp.Kind, State: store.StatePending,
		Spec: spec, Submitter: caller.User, IdempotencyKey: key}
	sub := submission{pod: valid, row: row, digestKey: digestKey}
	if err := sub.digest(asked); err != nil {
		return submission{}, err
	}
	return sub, nil
}

// digest records req's digest as the request of the submission's
// Idempotency-Key (none without a key): req's kind defaulted as the row's.
func (sub *submission) digest(req apiv1.SubmitRequest) error {
	if sub.row.IdempotencyKey == "" {
		return nil
	}
	if req.Kind == "" {
		req.Kind = workpod.DefaultKind
	}
	request, err := requestJSON(req)
	if err != nil {
		return err
	}
	sub.request, sub.row.RequestSHA256 = request, workpod.Digest(sub.digestKey, request)
	return nil
}

// idPrefix is the prefix of a work pod id of kind ("" for the default).
func idPrefix(kind string) string {
	if kind == "" {
		return workpod.DefaultKind
	}
	if workpod.CheckKind(kind) != nil {
		return "wp" // Check reports the kind; the id must still be a name
	}
	return kind
}

// shapeFor resolves req's class as cluster offers it into the pod's shape:
// 422 naming the field and its bound for what the class or cluster does
// not allow, 403 for a caller outside the class's groups.
func shapeFor(p *profile.Profile, cluster profile.ClusterEntry, req apiv1.SubmitRequest, groups []string) (workpod.Shape, error) {
	class, err := p.ClassFor(cluster, req.Class, workpod.ShapeKind(req.Kind))
	if err != nil {
		return workpod.Shape{}, &httperr.Error{Code: http.StatusUnprocessableEntity, Field: "class", Msg: httperr.Truncate(err.Error(), maxMessageBytes)}
	}
	if !podclass.Allows(class, groups) {
		return workpod.Shape{}, httperr.New(http.StatusForbidden,
			fmt.Sprintf("class %q is only for members of %s", class.Name, strings.Join(class.Groups, ", ")))
	}
	shape, errs := podclass.Resolve(class, p.Pods.NodeSelector, podclass.Ask{GPUs: req.GPUs, Resources: req.Resources, Deadline: req.Deadline})
	if len(errs) > 0 {
		return workpod.Shape{}, &httperr.Error{Code: http.StatusUnprocessableEntity, Field: errs[0].Field, Msg: httperr.Truncate(errs.ToAggregate().Error(), maxMessageBytes)}
	}
	return shape, nil
}

// targetCluster is the cluster a submit naming name goes to: the default
// for "", name itself when the fleet has no such cluster (authorization is
// asked about what was named, before the 400 reveals the fleet).
func targetCluster(p *profile.Profile, name string) string {
	if c, ok := p.Cluster(name); ok {
		return c.Name
	}
	return name
}

// dispatchAndRecord creates the submission's pod on its spoke and records
// the outcome in its row. The spoke work outlives a client that hangs up:
// the row must end in a state that says what happened.
func (s *Server) dispatchAndRecord(ctx context.Context, sub submission) (store.WorkPod, error) {
	ctx, cancel := detach(ctx, s.DispatchTimeout)
	defer cancel()
	defer s.Dispatches.Dispatching(sub.row.ID)()
	res, derr := s.Dispatcher.Dispatch(ctx, sub.row.Cluster, sub.pod)
	for derr != nil && dispatch.QuotaExceeded(derr) {
		moved, ok := s.spillRefused(ctx, sub, derr)
		if !ok {
			break
		}
		sub = moved
		res, derr = s.Dispatcher.Dispatch(ctx, sub.row.Cluster, sub.pod)
	}
	id, cluster := sub.row.ID, sub.row.Cluster
	if derr != nil {
		// The row records the failure unless the pod's own fate was
		// recorded meanwhile (a watch that saw it finish, a cancel).
		_, err := s.Store.TransitionWorkPod(ctx, id, store.Transition{From: dispatchFailable, To: store.StateFailed,
			Reason: "dispatch: " + dispatch.PublicMessage(derr), Finish: true})
		if err != nil && !errors.Is(err, store.ErrConflict) {
			s.Log.Error("recording a failed dispatch failed", "pod", id, "error", err)
		}
		code := http.StatusBadGateway
		if errors.Is(derr, dispatch.ErrNotOurs) {
			code = http.StatusConflict
		}
		return store.WorkPod{}, httperr.Wrap(code, "dispatch to "+cluster+" failed: "+dispatch.PublicMessage(derr), derr)
	}
	// One conditional statement: pending → dispatched with the pod's uid.
	// A row the watch moved on already (dispatched, running, even finished)
	// or a cancel got to first is answered as it is.
	updated, err := s.Store.TransitionWorkPod(ctx, id, store.Transition{From: []store.State{store.StatePending},
		To: store.StateDispatched, PodUID: string(res.PodUID)})
	if errors.Is(err, store.ErrConflict) {
		updated, err = s.Store.GetWorkPod(ctx, id)
	}
	if err != nil {
		return store.WorkPod{}, fmt.Errorf("record dispatch of %s: %w", id, err)
	}
	updated.Spec = sub.row.Spec // a transition returns the row without it
	return updated, nil
}

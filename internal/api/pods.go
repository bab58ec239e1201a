package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/apiauth"
	"crucible.dev/crucible/internal/dispatch"
	"crucible.dev/crucible/internal/httperr"
	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/store"
)

// view is a row as the API shows it. Of the stored spec the image, command
// and args are shown, and of env, files and secret files only the names, so
// only those are decoded (values are never read). List views read rows
// without their spec and show none of it.
func view(p store.WorkPod) apiv1.WorkPod {
	var spec struct {
		Image   string   `json:"image"`
		Command []string `json:"command"`
		Args    []string `json:"args"`
		Env     []struct {
			Name string `json:"name"`
		} `json:"env"`
		Files         map[string]json.RawMessage `json:"files"`
		SecretDigests map[string]json.RawMessage `json:"secret_digests"`
	}
	if p.Spec != nil {
		_ = json.Unmarshal(p.Spec, &spec)
	}
	wp := apiv1.WorkPod{
		ID: p.ID, Cluster: p.Cluster, Namespace: p.Namespace, Kind: p.Kind, State: p.State, Image: spec.Image,
		Command: spec.Command, Args: spec.Args, FileNames: sortedKeys(spec.Files), SecretFileNames: sortedKeys(spec.SecretDigests),
		PodUID: p.PodUID, ExitCode: p.ExitCode, Reason: p.Reason, LogCollected: p.LogCollected, Submitter: p.Submitter,
		CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt, FinishedAt: p.FinishedAt, Node: p.Node,
	}
	if w := p.Waiting; w != nil {
		wp.Waiting = &apiv1.Waiting{Reason: w.Reason, Message: w.Message, Since: w.Since}
	}
	if pl := p.Placement; pl != nil {
		wp.Placement = &apiv1.Placement{Decision: pl.Decision, Chosen: p.Cluster, Waits: pl.Waits}
	}
	for _, e := range spec.Env {
		wp.EnvNames = append(wp.EnvNames, e.Name)
	}
	return wp
}

// historyView is a pod's history as the API shows it: always a list, also
// an empty one, so that a client can tell it from a view without one.
func historyView(h []store.HistoryEntry) []apiv1.HistoryEntry {
	out := make([]apiv1.HistoryEntry, 0, len(h))
	for _, e := range h {
		out = append(out, apiv1.HistoryEntry{At: e.At, Event: e.Event, State: e.State, Reason: e.Reason, Message: e.Message})
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	if len(m) == 0 {
		return nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// dispatchFailable are the states a failed dispatch moves to failed: the
// live ones, and lost — the dispatcher deletes the pod it made when a later
// step fails, and the watch, having seen the pod come and go within the
// dispatch, may mark the row lost ("deleted before it finished") first. The
// dispatch's error is that row's story, not the watch's guess.
var dispatchFailable = append(slices.Clone(store.LiveStates), store.StateLost)

func (s *Server) submit(w http.ResponseWriter, r *http.Request) error {
	key, err := idempotencyKey(r)
	if err != nil {
		return err
	}
	var req apiv1.SubmitRequest
	if err := s.decode(w, r, &req); err != nil {
		return err
	}
	p := s.profile()
	if errs := apiv1.CheckPlacement(req); len(errs) > 0 {
		return badRequest(errs)
	}
	auto := wantsPlacement(p, req)
	if req.Placement != "" && !auto {
		// The default cluster is a named one: strict would mean nothing.
		return &httperr.Error{Code: http.StatusBadRequest, Field: "placement",
			Msg: `placement: strict applies to cluster "auto" or a clusters list; this submit goes to the default cluster ` + p.DefaultCluster}
	}
	id := newID(idPrefix(req.Kind))
	var where placed
	sent := false
	if auto {
		// Authorized spoke by spoke: a spoke the caller may not create on
		// is no candidate.
		if where, err = s.place(r, p, req, id); err != nil {
			return err
		}
		defer func() {
			if !sent {
				s.release(where)
			}
		}()
	} else if err := s.authorize(r, apiauth.Attributes{Verb: apiauth.VerbCreate, Cluster: targetCluster(p, req.Cluster)}); err != nil {
		// Authorized before anything about the cluster is revealed.
		return err
	}
	digestKey, err := s.digestKey(r.Context())
	if err != nil {
		return err
	}
	var sub submission
	if auto {
		// A retry is placed anew and may land elsewhere: the digest is of
		// the request as asked, so that it still matches.
		sub, err = submissionFor(where.valid, where.cluster, identity(r), key, digestKey, req)
		sub.row.Placement = where.record
	} else {
		sub, err = newSubmission(p, req, identity(r), key, digestKey, func(string) string { return id })
	}
	if err != nil {
		return err
	}
	// With a key, the insert itself decides which of several requests
	// carrying it (retries, also on other replicas) makes the row.
	if _, err := s.Store.CreateWorkPod(r.Context(), sub.row); errors.Is(err, store.ErrKeyTaken) {
		return s.replaySubmit(w, r, key, req, sub)
	} else if err != nil {
		return fmt.Errorf("record work pod: %w", err)
	}
	updated, err := s.dispatchAndRecord(r.Context(), sub)
	if err != nil {
		return err
	}
	sent = true
	writeJSON(w, http.StatusCreated, view(updated))
	return nil
}

var knownStates = []store.State{store.StatePending, store.StateDispatched, store.StateRunning, store.StateSucceeded,
	store.StateFailed, store.StateCancelled, store.StateLost}

func (s *Server) list(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	f := store.Filter{Cluster: q.Get("cluster"), Kind: q.Get("kind")}
	if f.Cluster != "" {
		if _, ok := s.profile().Cluster(f.Cluster); !ok {
			return &httperr.Error{Code: http.StatusBadRequest, Field: "cluster", Msg: fmt.Sprintf("cluster %q: no such cluster", httperr.Truncate(f.Cluster, 100))}
		}
	}
	if f.Kind != "" && f.Kind != "loop" && f.Kind != "turn" {
		return &httperr.Error{Code: http.StatusBadRequest, Field: "kind", Msg: fmt.Sprintf("kind %q: must be loop or turn", httperr.Truncate(f.Kind, 20))}
	}
	for _, st := range q["state"] {
		for _, one := range strings.Split(st, ",") {
			if !slices.Contains(knownStates, store.State(one)) {
				return &httperr.Error{Code: http.StatusBadRequest, Field: "state", Msg: fmt.Sprintf("state %q: must be one of %v", httperr.Truncate(one, 20), knownStates)}
			}
			f.States = append(f.States, store.State(one))
		}
	}
	if s.PageSize <= 0 {
		// The profile's api.page_size, whose default package profile applies:
		// a server built without it is a bug, not a reason for a second default.
		return fmt.Errorf("api: PageSize %d: not the profile's api.page_size", s.PageSize)
	}
	f.Limit = s.PageSize
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > profile.MaxAPIPageSize {
			return &httperr.Error{Code: http.StatusBadRequest, Field: "limit", Msg: fmt.Sprintf("limit %q: must be a number from 1 to %d", httperr.Truncate(l, 20), profile.MaxAPIPageSize)}
		}
		f.Limit = n
	}
	if c := q.Get("continue"); c != "" {
		after, err := decodeContinue(c)
		if err != nil {
			return &httperr.Error{Code: http.StatusBadRequest, Field: "continue", Msg: "continue: not a token this API issued"}
		}
		f.After = &after
	}
	// One row more than the page tells whether there is a next page.
	page := f.Limit
	f.Limit++
	f.WithoutSpec = true
	rows, err := s.Store.ListWorkPods(r.Context(), f)
	if err != nil {
		return err
	}
	if len(rows) > page {
		rows = rows[:page]
		last := rows[page-1]
		w.Header().Set(apiv1.ContinueHeader, encodeContinue(store.Cursor{CreatedAt: last.CreatedAt, ID: last.ID}))
	}
	out := make([]apiv1.WorkPod, 0, len(rows))
	for _, p := range rows {
		out = append(out, view(p))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) row(r *http.Request) (store.WorkPod, error) {
	id := r.PathValue("pod")
	p, err := s.Store.GetWorkPod(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		return p, notFound(fmt.Sprintf("work pod %q", httperr.Truncate(id, 100)))
	}
	return p, err
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) error {
	p, err := s.row(r)
	if err != nil {
		return err
	}
	h, err := s.Store.PodHistory(r.Context(), p.ID)
	if err != nil {
		return err
	}
	wp := view(p)
	wp.History = historyView(h)
	if wp.Placement != nil {
		for _, e := range h {
			if from, to, ok := e.Move(); ok {
				wp.Placement.Moves = append(wp.Placement.Moves, apiv1.Move{From: from, To: to, Reason: e.Reason, At: e.At})
			}
		}
	}
	writeJSON(w, http.StatusOK, wp)
	return nil
}

// cancel marks the row cancelled and then deletes the pod on its spoke. The
// row goes first: the informer then sees the pod vanish from a finished row
// instead of declaring a live one lost. If the delete fails, the row stays
// cancelled and the sweep removes the pod after the orphan grace.
func (s *Server) cancel(w http.ResponseWriter, r *http.Request) error {
	p, err := s.row(r)
	if err != nil {
		return err
	}
	ctx, cancel := detach(r.Context(), s.DispatchTimeout)
	defer cancel()
	updated, err := s.Store.TransitionWorkPod(ctx, p.ID, store.Transition{From: store.LiveStates, To: store.StateCancelled,
		Reason: "cancelled through the API", Finish: true})
	if errors.Is(err, store.ErrConflict) {
		// Finished (or cancelled) since it was read: name what it is now.
		if now, gerr := s.Store.GetWorkPod(ctx, p.ID); gerr == nil {
			return httperr.New(http.StatusConflict, fmt.Sprintf("work pod %s is already %s", p.ID, now.State))
		}
	}
	if err != nil {
		return err
	}
	updated.Spec = p.Spec // a transition returns the row without it
	s.Uploads.Forget(p.ID)
	if err := s.Dispatcher.Delete(ctx, p.Cluster, p.Namespace, p.ID, podUID(p)); err != nil {
		return httperr.Wrap(http.StatusBadGateway, "cancelled, but deleting the pod on "+p.Cluster+" failed (the sweep will retry): "+dispatch.PublicMessage(err), err)
	}
	writeJSON(w, http.StatusOK, view(updated))
	return nil
}

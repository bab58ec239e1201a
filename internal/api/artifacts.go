package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"slices"
	"strconv"

	"k8s.io/apimachinery/pkg/types"

	"crucible.dev/crucible/internal/apiauth"
	"crucible.dev/crucible/internal/artifact"
	"crucible.dev/crucible/internal/httperr"
	"crucible.dev/crucible/internal/store"
)

func podUID(p store.WorkPod) types.UID { return types.UID(p.PodUID) }

// ArtifactReader opens recorded artifact bytes by their content address:
// artifact.Dir with SQLite, pgblob.Blobs with PostgreSQL (whichever replica
// stored them). Missing content wraps fs.ErrNotExist.
type ArtifactReader interface {
	Open(ctx context.Context, podID, kind, digest string) (io.ReadCloser, error)
}

func (s *Server) listArtifacts(w http.ResponseWriter, r *http.Request) error {
	p, err := s.row(r)
	if err != nil {
		return err
	}
	arts, err := s.Store.ListArtifacts(r.Context(), p.ID)
	if err != nil {
		return err
	}
	arts, err = s.visibleArtifacts(r, p, arts)
	if err != nil {
		return err
	}
	if arts == nil {
		arts = []store.Artifact{}
	}
	writeJSON(w, http.StatusOK, arts)
	return nil
}

// getArtifact streams an artifact's bytes; the digest travels in headers.
func (s *Server) getArtifact(w http.ResponseWriter, r *http.Request) error {
	p, err := s.row(r)
	if err != nil {
		return err
	}
	kind := r.PathValue("kind")
	a, err := s.readableArtifact(r, p, kind)
	if err != nil {
		return err
	}
	return s.serveStored(w, r, a, "artifact", http.Header{
		"Content-Type":      {"application/octet-stream"},
		"Content-Length":    {strconv.FormatInt(a.Size, 10)},
		"X-Crucible-Sha256": {a.SHA256},
		"Etag":              {`"sha256:` + a.SHA256 + `"`},
	})
}

// serveStored answers the bytes of a recorded artifact with header: the
// file the record's digest names, content-addressed, so these are the
// recorded bytes even while another writer of the kind loses its claim
// beside it. A record whose file is missing is a 500 naming what.
func (s *Server) serveStored(w http.ResponseWriter, r *http.Request, a store.Artifact, what string, header http.Header) error {
	f, err := s.Artifacts.Open(r.Context(), a.PodID, a.Kind, a.SHA256)
	if errors.Is(err, fs.ErrNotExist) {
		return &httperr.Error{Code: http.StatusInternalServerError, Msg: what + " recorded but its file is missing", Err: err}
	}
	if err != nil {
		return err
	}
	defer f.Close()
	maps.Copy(w.Header(), header)
	w.WriteHeader(http.StatusOK) //nolint:forbidigo // a stream: the recorded bytes, copied from their file
	if _, err := io.CopyN(w, f, a.Size); err != nil {
		s.Log.Warn("stored file download interrupted", "pod", a.PodID, "kind", a.Kind, "error", err)
	}
	return nil
}

// controllerOwned reports whether a is the controller's rather than the
// pod's: the tier-1 log and the other reserved kinds, and whatever the
// controller recorded. They are what GET /api/pods/{pod}/logs serves, so
// they are read with workpods/log; workpods/artifacts alone is for what the
// pod uploaded (R-IN7).
func controllerOwned(a store.Artifact) bool {
	return artifact.Reserved(a.Kind) || a.Source == store.SourceController
}

// logAttributes is the permission a controller-owned artifact of p needs
// besides the route's workpods/artifacts.
func logAttributes(p store.WorkPod) apiauth.Attributes {
	return apiauth.Attributes{Verb: apiauth.VerbGet, Subresource: apiauth.SubresourceLog, Cluster: p.Cluster}
}

// readableArtifact is the record of p's artifact kind, if the caller may
// read it. A reserved kind is authorized before the record is read, so that
// whether p has one is not shown to a caller who may not read it.
func (s *Server) readableArtifact(r *http.Request, p store.WorkPod, kind string) (store.Artifact, error) {
	if !artifact.ValidName(kind) {
		return store.Artifact{}, &httperr.Error{Code: http.StatusBadRequest, Field: "kind", Msg: fmt.Sprintf("kind %q: must be a DNS label", httperr.Truncate(kind, 100))}
	}
	reserved := artifact.Reserved(kind)
	if reserved {
		if err := s.authorize(r, logAttributes(p)); err != nil {
			return store.Artifact{}, err
		}
	}
	a, err := s.Store.GetArtifact(r.Context(), p.ID, kind)
	if errors.Is(err, store.ErrNotFound) {
		return a, notFound(fmt.Sprintf("artifact %q of %s", kind, p.ID))
	}
	if err != nil {
		return a, err
	}
	if !reserved && controllerOwned(a) {
		if err := s.authorize(r, logAttributes(p)); err != nil {
			return store.Artifact{}, err
		}
	}
	return a, nil
}

// visibleArtifacts leaves the controller-owned artifacts out of arts unless
// the caller may read p's log. The authorizer is asked once, and only when
// there is something to leave out; a hub that cannot answer fails the list
// rather than shorten it.
func (s *Server) visibleArtifacts(r *http.Request, p store.WorkPod, arts []store.Artifact) ([]store.Artifact, error) {
	if !slices.ContainsFunc(arts, controllerOwned) {
		return arts, nil
	}
	err := s.Authz.Authorize(r.Context(), identity(r), logAttributes(p))
	switch {
	case err == nil:
		return arts, nil
	case errors.Is(err, apiauth.ErrForbidden):
		return slices.DeleteFunc(arts, controllerOwned), nil
	}
	return nil, authError(err)
}

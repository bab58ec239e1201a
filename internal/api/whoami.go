package api

import (
	"context"
	"errors"
	"net/http"
	"sync"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/apiauth"
)

// whoamiChecks are the permissions whoami asks about, and where each answer goes.
var whoamiChecks = []struct {
	a   apiauth.Attributes
	set func(*apiv1.Rights, bool)
}{
	{apiauth.Attributes{Verb: apiauth.VerbCreate}, func(r *apiv1.Rights, v bool) { r.Create = v }},
	{apiauth.Attributes{Verb: apiauth.VerbList}, func(r *apiv1.Rights, v bool) { r.List = v }},
	{apiauth.Attributes{Verb: apiauth.VerbGet}, func(r *apiv1.Rights, v bool) { r.Get = v }},
	{apiauth.Attributes{Verb: apiauth.VerbDelete}, func(r *apiv1.Rights, v bool) { r.Delete = v }},
	{apiauth.Attributes{Verb: apiauth.VerbGet, Subresource: apiauth.SubresourceLog}, func(r *apiv1.Rights, v bool) { r.Log = v }},
	{apiauth.Attributes{Verb: apiauth.VerbGet, Subresource: apiauth.SubresourceArtifacts}, func(r *apiv1.Rights, v bool) { r.Artifacts = v }},
}

// whoami tells the caller who the API takes them for and what they may do,
// asking the same authorizer the routes ask (its caches absorb the
// repeats). A check that cannot be answered now is a 503, never a "no".
func (s *Server) whoami(w http.ResponseWriter, r *http.Request) error {
	id := identity(r)
	names := []string{""}
	for _, c := range s.profile().Clusters {
		names = append(names, c.Name)
	}
	var asks []apiauth.Attributes
	for _, name := range names {
		for _, check := range whoamiChecks {
			a := check.a
			a.Cluster = name
			asks = append(asks, a)
		}
	}
	allowed, err := s.permitted(r.Context(), id, asks)
	if err != nil {
		return err
	}
	rights := make([]apiv1.Rights, len(names))
	for i := range names {
		for j, check := range whoamiChecks {
			check.set(&rights[i], allowed[i*len(whoamiChecks)+j])
		}
	}
	mode := s.AuthMode
	if mode == "" {
		mode = "none"
	}
	out := apiv1.WhoAmI{User: id.User, Auth: mode, All: rights[0], Clusters: map[string]apiv1.Rights{}}
	for i, name := range names[1:] {
		out.Clusters[name] = rights[i+1]
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, out)
	return nil
}

// permitted asks the authorizer about every attribute at once (its caches
// absorb the repeats): which are allowed, or, if any check could not be
// answered now, that error as the API answers it — a 503, never a "no".
func (s *Server) permitted(ctx context.Context, id apiauth.Identity, asks []apiauth.Attributes) ([]bool, error) {
	allowed := make([]bool, len(asks))
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for i, a := range asks {
		wg.Go(func() {
			err := s.Authz.Authorize(ctx, id, a)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				allowed[i] = true
			case errors.Is(err, apiauth.ErrForbidden):
			case firstErr == nil:
				firstErr = err
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return nil, authError(firstErr)
	}
	return allowed, nil
}

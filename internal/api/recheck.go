package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/apiauth"
	"crucible.dev/crucible/internal/profile"
)

// callerGone is why a stream's caller may no longer read it: the cause its
// context is cancelled with (watchCaller), and the data of the error event
// that ends it.
type callerGone struct {
	reason string
	// runLive: the profile no longer allows the session (a run-live
	// session's own check), not the caller's access.
	runLive bool
}

func (g callerGone) Error() string { return g.reason }

// recheckEvery is how often a long-lived stream checks its caller again:
// the profile's [api] stream_recheck (read on each stream, so a reloaded
// profile applies to the next), package profile's default without a profile.
// apiauth does not tell a token's expiry, so the interval is the only
// clock: a token that expires between two checks is refused at the next.
func (s *Server) recheckEvery() time.Duration {
	if d := s.profile().API.StreamRecheck.Duration; d > 0 {
		return d
	}
	return profile.Default().API.StreamRecheck.Duration
}

// streamCheck is a condition a stream holds beyond its route's permission
// (a run-live session's other permission, its cluster's run_live): nil
// while it holds, why not once it does not.
type streamCheck func(ctx context.Context, r *http.Request, id apiauth.Identity) *callerGone

// watchCaller returns a context of ctx that ends, with a callerGone cause,
// once a check of r's caller finds its credentials or its permission gone:
// every recheckEvery, the original request is authenticated again (its
// bearer token or proxy identity) and the identity authorized again for
// the route's permission on cluster, as the guard did when the stream
// began, and then each of checks asked. A stream holds its caller's access
// for as long as it lasts; this is what takes it back when the hub does (a
// deleted RoleBinding, an expired or revoked token). A hub that cannot
// answer ends nothing: the next check asks again. Call stop when the
// stream ends.
func (s *Server) watchCaller(ctx context.Context, r *http.Request, cluster string, checks ...streamCheck) (_ context.Context, stop func()) {
	ru := rules[r.Pattern]
	a := apiauth.Attributes{Verb: ru.verb, Subresource: ru.subresource, Cluster: cluster}
	ctx, cancel := context.WithCancelCause(ctx)
	every := s.recheckEvery()
	go func() {
		_ = wait.PollUntilContextCancel(ctx, every, false, func(ctx context.Context) (bool, error) {
			gone := s.recheck(ctx, r, a, checks)
			if gone != nil {
				cancel(gone)
			}
			return gone != nil, nil
		})
	}()
	return ctx, func() { cancel(nil) }
}

// recheck asks once whether r's caller still authenticates as the same
// user, may still do a and still passes checks; nil when it may, or when
// the hub cannot tell.
func (s *Server) recheck(ctx context.Context, r *http.Request, a apiauth.Attributes, checks []streamCheck) *callerGone {
	was := identity(r)
	id, err := s.Authn.Authenticate(r.WithContext(ctx))
	switch {
	case errors.Is(err, apiauth.ErrUnauthenticated):
		return s.gone(r, was, "credentials expired or revoked: "+err.Error())
	case err != nil:
		s.Log.Debug("stream re-check could not authenticate its caller; asking again at the next check", "path", r.URL.Path, "caller", callerName(was), "error", err)
		return nil
	case id.User != was.User:
		return s.gone(r, was, "the credentials now name another caller; reconnect")
	}
	if gone := s.stillAllowed(ctx, r, id, a); gone != nil {
		return gone
	}
	for _, check := range checks {
		if gone := check(ctx, r, id); gone != nil {
			return gone
		}
	}
	return nil
}

// stillAllowed asks whether id may still do a: a denial ends the stream,
// a hub that cannot answer does not.
func (s *Server) stillAllowed(ctx context.Context, r *http.Request, id apiauth.Identity, a apiauth.Attributes) *callerGone {
	err := s.Authz.Authorize(ctx, id, a)
	switch {
	case errors.Is(err, apiauth.ErrForbidden):
		return s.gone(r, id, "permission revoked: "+err.Error())
	case err != nil:
		s.Log.Debug("stream re-check could not authorize its caller; asking again at the next check", "path", r.URL.Path, "caller", callerName(id), "error", err)
	}
	return nil
}

// gone logs the end of a stream whose caller lost its access and returns
// why.
func (s *Server) gone(r *http.Request, was apiauth.Identity, reason string) *callerGone {
	s.Log.Info("stream ended: its caller's access is gone", "path", r.URL.Path, "caller", callerName(was), "reason", reason)
	return &callerGone{reason: reason}
}

// endIfCallerGone ends a stream whose context watchCaller cancelled with an
// error event saying why, unless the stream already sent its last event.
func endIfCallerGone(ctx context.Context, sse *sseWriter) {
	var gone *callerGone
	if sse.final || !errors.As(context.Cause(ctx), &gone) {
		return
	}
	sse.event("error", "", apiv1.ErrorEvent{Error: gone.reason})
	_ = sse.flush()
}

package api

import (
	"context"
	"errors"
	"fmt"
	"mime"
	"net"
	"net/http"
	"strings"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/apiauth"
	"crucible.dev/crucible/internal/httperr"
	"crucible.dev/crucible/internal/store"
)

// retryAfterSeconds is what a 503 tells the client to wait.
const retryAfterSeconds = "5"

// Authenticator tells who sent a request (apiauth: anonymous, hub bearer
// token, SSO proxy headers).
type Authenticator interface {
	Authenticate(r *http.Request) (apiauth.Identity, error)
}

// Authorizer decides whether an identity may do something to the work pods
// of a cluster.
type Authorizer interface {
	Authorize(ctx context.Context, id apiauth.Identity, a apiauth.Attributes) error
}

var (
	_ Authenticator = apiauth.Anonymous{}
	_ Authorizer    = apiauth.AllowAll{}
)

// scope says where a route's cluster (the resource name it is authorized
// against) comes from.
type scope int

const (
	scopeAll     scope = iota // every cluster ("")
	scopeQuery                // ?cluster=, "" = every cluster
	scopeRow                  // the cluster of the work pod in the path
	scopeBody                 // the handler authorizes once it read the body
	scopeNothing              // authenticated only: the catch-all 404
)

type rule struct {
	verb, subresource string
	scope             scope
	download          bool
}

// rules maps every route pattern of the API to the permission it needs. A
// route without a rule is refused: a new endpoint must say what it needs.
// The artifacts the controller owns (the log) need get on workpods/log as
// well, which the handlers ask (visibleArtifacts, readableArtifact): it
// depends on the kind, not only the route.
var rules = map[string]rule{
	"POST /api/pods":                       {verb: apiauth.VerbCreate, scope: scopeBody},
	"GET /api/pods":                        {verb: apiauth.VerbList, scope: scopeQuery},
	"GET /api/pods/{pod}":                  {verb: apiauth.VerbGet, scope: scopeRow},
	"POST /api/pods/{pod}/cancel":          {verb: apiauth.VerbDelete, scope: scopeRow},
	"GET /api/pods/{pod}/logs":             {verb: apiauth.VerbGet, subresource: apiauth.SubresourceLog, scope: scopeRow},
	"GET /api/pods/{pod}/artifacts":        {verb: apiauth.VerbGet, subresource: apiauth.SubresourceArtifacts, scope: scopeRow},
	"GET /api/pods/{pod}/artifacts/{kind}": {verb: apiauth.VerbGet, subresource: apiauth.SubresourceArtifacts, scope: scopeRow, download: true},
	"GET /api/pods/{pod}/portforward":      {verb: apiauth.VerbCreate, subresource: apiauth.SubresourcePortForward, scope: scopeRow},
	"GET /api/pods/{pod}/run-live":         {verb: apiauth.VerbGet, scope: scopeRow}, // the handler also asks create on workpods/portforward, to tell
	"GET /api/clusters":                    {verb: apiauth.VerbList, scope: scopeAll},
	"GET /api/capacity":                    {verb: apiauth.VerbList, scope: scopeAll},
	"GET /api/capacity/history":            {verb: apiauth.VerbList, scope: scopeQuery},
	"GET /api/events":                      {verb: apiauth.VerbList, scope: scopeQuery},
	"GET /api/classes":                     {scope: scopeNothing}, // the handler asks create per cluster
	"GET /api/whoami":                      {scope: scopeNothing}, // says what the caller may do; reveals nothing else
	"/api/":                                {scope: scopeNothing},
}

type identityKey struct{}

// identity is the caller of r, as the guard authenticated it.
func identity(r *http.Request) apiauth.Identity {
	id, _ := r.Context().Value(identityKey{}).(apiauth.Identity)
	return id
}

// stateChanging: everything but reads.
func stateChanging(method string) bool {
	return method != http.MethodGet && method != http.MethodHead && method != http.MethodOptions
}

// guard runs before every handler: Host allowlist, then for state-changing
// requests the CSRF and Content-Type checks, then authentication and
// authorization. It returns the request carrying the caller's identity.
func (s *Server) guard(w http.ResponseWriter, r *http.Request) (*http.Request, error) {
	if err := s.checkHost(r); err != nil {
		return r, err
	}
	if stateChanging(r.Method) {
		if err := checkCrossSite(r); err != nil {
			return r, err
		}
		if err := checkJSON(r); err != nil {
			return r, err
		}
	}
	id, err := s.Authn.Authenticate(r)
	if err != nil {
		return r, authError(err)
	}
	r = r.WithContext(context.WithValue(r.Context(), identityKey{}, id))
	ru, ok := rules[r.Pattern]
	if !ok {
		return r, &httperr.Error{Code: http.StatusForbidden, Msg: "no authorization rule for " + r.Pattern, Err: errors.New("route without a rule")}
	}
	var cluster string
	switch ru.scope {
	case scopeNothing, scopeBody:
		return r, nil
	case scopeQuery:
		cluster = r.URL.Query().Get("cluster")
	case scopeRow:
		// An unknown pod is authorized against every cluster, so that its
		// 404 is only shown to someone who may read any pod.
		p, err := s.Store.GetWorkPod(r.Context(), r.PathValue("pod"))
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return r, err
		}
		cluster = p.Cluster
	}
	if err := s.authorize(r, apiauth.Attributes{Verb: ru.verb, Subresource: ru.subresource, Cluster: cluster}); err != nil {
		return r, err
	}
	if ru.download {
		// A downloaded artifact is whatever a pod wrote: never let a
		// browser render it as a page of this origin.
		w.Header().Set("Content-Disposition", "attachment")
		w.Header().Set("Content-Security-Policy", "sandbox")
		w.Header().Set("X-Content-Type-Options", "nosniff")
	}
	return r, nil
}

// authorize asks the authorizer whether r's caller may do a.
func (s *Server) authorize(r *http.Request, a apiauth.Attributes) error {
	if err := s.Authz.Authorize(r.Context(), identity(r), a); err != nil {
		return authError(err)
	}
	return nil
}

// authError maps apiauth's sentinels to what the client sees. The message is
// apiauth's (it never contains a token).
func authError(err error) error {
	switch {
	case errors.Is(err, apiauth.ErrUnavailable):
		return &httperr.Error{Code: http.StatusServiceUnavailable, Msg: "cannot check your identity or permissions right now; retry later", Err: err}
	case errors.Is(err, apiauth.ErrUnauthenticated):
		return &httperr.Error{Code: http.StatusUnauthorized, Msg: err.Error()}
	case errors.Is(err, apiauth.ErrForbidden):
		return &httperr.Error{Code: http.StatusForbidden, Msg: err.Error()}
	}
	return err
}

// checkHost refuses a Host header outside the allowlist: a DNS-rebinding
// page reaches a loopback listener under its own name.
func (s *Server) checkHost(r *http.Request) error {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	for _, ok := range s.AllowedHosts {
		if strings.EqualFold(host, ok) {
			return nil
		}
	}
	return &httperr.Error{Code: http.StatusMisdirectedRequest, Msg: fmt.Sprintf("Host %q is not one this API answers to (api.allowed_hosts)", httperr.Truncate(r.Host, 100))}
}

// checkCrossSite refuses a state-changing request a browser marked as
// coming from another origin, and one from a non-browser without
// ClientHeader.
func checkCrossSite(r *http.Request) error {
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "same-origin":
		return nil
	case "":
		if r.Header.Get(apiv1.ClientHeader) == "" {
			return &httperr.Error{Code: http.StatusForbidden, Msg: "state-changing requests need the " + apiv1.ClientHeader + " header"}
		}
		return nil
	default:
		return &httperr.Error{Code: http.StatusForbidden, Msg: fmt.Sprintf("cross-site request refused (Sec-Fetch-Site: %s)", httperr.Truncate(site, 20))}
	}
}

// checkJSON requires Content-Type application/json on every state-changing
// request, body or not: an HTML form cannot send it without a preflight.
func checkJSON(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		if ct == "" {
			ct = "none"
		}
		return &httperr.Error{Code: http.StatusUnsupportedMediaType, Msg: "Content-Type must be application/json, not " + httperr.Truncate(ct, 100)}
	}
	return nil
}

// Package apiauth owns who may call the controller's API (R-C12): it turns a
// request into an Identity (nobody in particular on loopback, a hub bearer
// token checked by TokenReview, or a trusted SSO proxy's headers) and decides
// with a SubjectAccessReview on the hub whether that identity may do one
// thing to work pods of one cluster. Answers are cached briefly, accepts and
// denials apart; a hub that cannot answer is ErrUnavailable, never a "no".
package apiauth

import (
	"context"
	"errors"
	"slices"
	"strings"
)

// Sentinels; the API maps them to 401, 403 and 503 (+Retry-After).
var (
	ErrUnauthenticated = errors.New("unauthenticated")
	ErrForbidden       = errors.New("forbidden")
	// ErrUnavailable: the hub could not answer (unreachable, 5xx, timeout,
	// throttled). It might be transient, so it is never cached.
	ErrUnavailable = errors.New("authentication or authorization unavailable")
)

// The authorization scope: crucible's own resource on the hub. The cluster
// (spoke) a request is about is the resource name; "" means every cluster.
const (
	Group                = "crucible.dev"
	Resource             = "workpods"
	SubresourceLog       = "log"
	SubresourceArtifacts = "artifacts"
	// SubresourcePortForward is the permission of a run-live session:
	// create on workpods/portforward, the pod's cluster as resource name.
	SubresourcePortForward = "portforward"
)

// Verbs checked by the API.
const (
	VerbCreate = "create"
	VerbGet    = "get"
	VerbList   = "list"
	VerbDelete = "delete"
	// VerbCreateAny on workpods/portforward lets a caller port-forward into
	// pods another submitter made; create alone reaches its own. A verb,
	// not a subresource, as RBAC's own extra checks on one request are
	// (bind and escalate on roles, approve on signers): the endpoint is
	// the same, and a subresource names an endpoint.
	VerbCreateAny = "create-any"
)

// AnonymousUser is the identity of every caller with auth "none", recorded as
// the submitter.
const AnonymousUser = "crucible:anonymous"

// Identity is who made a request.
type Identity struct {
	User   string
	UID    string
	Groups []string
	Extra  map[string][]string
}

// Attributes is what a request wants to do: a verb on workpods (or one of
// its subresources) of a cluster.
type Attributes struct {
	Verb        string
	Subresource string
	Cluster     string // the resource name; "" = all clusters
}

// String renders the permission the way kubectl auth can-i would name it.
func (a Attributes) String() string {
	r := Resource
	if a.Subresource != "" {
		r += "/" + a.Subresource
	}
	s := a.Verb + " " + r + "." + Group
	if a.Cluster != "" {
		s += " " + a.Cluster
	}
	return s
}

// Authorizer decides whether id may do a.
type Authorizer interface {
	Authorize(ctx context.Context, id Identity, a Attributes) error
}

// AllowAll is the authorizer of auth "none".
type AllowAll struct{}

// Authorize allows everything.
func (AllowAll) Authorize(context.Context, Identity, Attributes) error { return nil }

var _ Authorizer = AllowAll{}

// systemName reports names only the hub itself may hand out; a proxy header
// carrying one is refused (system:masters would be cluster-admin).
func systemName(s string) bool { return strings.HasPrefix(s, "system:") }

// sorted returns a sorted copy, so equal identities make equal cache keys.
func sorted(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}

package apiauth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"golang.org/x/sync/singleflight"
	authorizationv1 "k8s.io/api/authorization/v1"

	"crucible.dev/crucible/internal/lru"
	"crucible.dev/crucible/internal/metrics"
)

// AccessReviewer asks the hub whether a subject may do something. An error
// means the hub did not answer.
type AccessReviewer interface {
	ReviewAccess(ctx context.Context, spec authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error)
}

// SubjectAccess authorizes with a SubjectAccessReview on the hub against
// group crucible.dev, resource workpods (or a subresource), the cluster as
// the resource name, in Namespace: a RoleBinding there or a
// ClusterRoleBinding grants access. Allows and denials are cached apart.
type SubjectAccess struct {
	reviewer  AccessReviewer
	namespace string
	allowTTL  time.Duration
	denyTTL   time.Duration
	cache     *lru.Cache[accessAnswer]
	flight    singleflight.Group
	now       func() time.Time
}

type accessAnswer struct {
	allowed bool
	reason  string
}

var _ Authorizer = (*SubjectAccess)(nil)

// NewSubjectAccess returns an authorizer remembering at most size answers.
func NewSubjectAccess(r AccessReviewer, namespace string, allowTTL, denyTTL time.Duration, size int) *SubjectAccess {
	return &SubjectAccess{reviewer: r, namespace: namespace, allowTTL: allowTTL, denyTTL: denyTTL,
		cache: lru.New[accessAnswer](size), now: time.Now}
}

// Spec is the review SubjectAccess sends for id and a.
func (s *SubjectAccess) Spec(id Identity, a Attributes) authorizationv1.SubjectAccessReviewSpec {
	spec := authorizationv1.SubjectAccessReviewSpec{
		User: id.User, UID: id.UID, Groups: sorted(id.Groups),
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: s.namespace, Verb: a.Verb, Group: Group, Resource: Resource,
			Subresource: a.Subresource, Name: a.Cluster,
		},
	}
	if len(id.Extra) > 0 {
		spec.Extra = map[string]authorizationv1.ExtraValue{}
		for k, v := range id.Extra {
			spec.Extra[k] = authorizationv1.ExtraValue(sorted(v))
		}
	}
	return spec
}

// Authorize returns nil, an ErrForbidden naming the missing permission, or
// ErrUnavailable.
func (s *SubjectAccess) Authorize(ctx context.Context, id Identity, a Attributes) error {
	spec := s.Spec(id, a)
	raw, err := json.Marshal(spec) // encoding/json sorts map keys
	if err != nil {
		return fmt.Errorf("encode access review: %w", err)
	}
	sum := sha256.Sum256(raw)
	key := hex.EncodeToString(sum[:])
	ans, ok := s.cache.Get(key, s.now())
	if ok {
		metrics.APIAuthCacheHits.WithLabelValues(reviewAccess, outcome(ans.allowed)).Inc()
	} else {
		var err error
		cached := func() (accessAnswer, bool) { return s.cache.Get(key, s.now()) }
		ans, err = coalesce(ctx, &s.flight, key, cached, func(ctx context.Context) (accessAnswer, error) {
			st, err := s.reviewer.ReviewAccess(ctx, spec)
			if err != nil {
				metrics.APIAuthReviews.WithLabelValues(reviewAccess, "error").Inc()
				return accessAnswer{}, fmt.Errorf("%w: access review on the hub: %w", ErrUnavailable, err)
			}
			if st.EvaluationError != "" && !st.Allowed && !st.Denied {
				metrics.APIAuthReviews.WithLabelValues(reviewAccess, "error").Inc()
				// RBAC could not read some bindings: a "no" now might be a
				// "yes" in a moment.
				return accessAnswer{}, fmt.Errorf("%w: access review on the hub: %s", ErrUnavailable, st.EvaluationError)
			}
			ans := accessAnswer{allowed: st.Allowed && !st.Denied, reason: st.Reason}
			metrics.APIAuthReviews.WithLabelValues(reviewAccess, outcome(ans.allowed)).Inc()
			ttl := s.denyTTL
			if ans.allowed {
				ttl = s.allowTTL
			}
			s.cache.Put(key, ans, s.now().Add(ttl))
			return ans, nil
		})
		if err != nil {
			return err
		}
	}
	if !ans.allowed {
		return fmt.Errorf("%w: %s may not %s", ErrForbidden, id.User, a)
	}
	return nil
}

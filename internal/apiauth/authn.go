package apiauth

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"golang.org/x/sync/singleflight"
	authenticationv1 "k8s.io/api/authentication/v1"

	"crucible.dev/crucible/internal/lru"
	"crucible.dev/crucible/internal/metrics"
)

// Label values of the review metrics.
const (
	reviewToken  = "tokenreview"
	reviewAccess = "subjectaccessreview"
)

func outcome(ok bool) string {
	if ok {
		return "allowed"
	}
	return "denied"
}

// MaxTokenBytes bounds a bearer token; hub tokens are a few KiB at most.
const MaxTokenBytes = 16 << 10

// Authenticator tells who sent a request.
type Authenticator interface {
	Authenticate(r *http.Request) (Identity, error)
}

// Anonymous is auth "none": every caller is AnonymousUser. The profile only
// allows it on a loopback listener.
type Anonymous struct{}

// Authenticate returns AnonymousUser.
func (Anonymous) Authenticate(*http.Request) (Identity, error) {
	return Identity{User: AnonymousUser}, nil
}

// TokenReviewer asks the hub who a token belongs to. An error means the hub
// did not answer; a status with Authenticated false is a definitive no.
type TokenReviewer interface {
	ReviewToken(ctx context.Context, token string) (authenticationv1.TokenReviewStatus, error)
}

// Bearer is auth "kubernetes": the caller presents a hub bearer token, which
// the hub's TokenReview turns into a user and groups. Accepts and rejections
// are cached apart, keyed by lru.TokenKey of the token.
type Bearer struct {
	reviewer    TokenReviewer
	acceptTTL   time.Duration
	negativeTTL time.Duration
	cache       *lru.Cache[tokenAnswer]
	flight      singleflight.Group
	now         func() time.Time
}

type tokenAnswer struct {
	id Identity
	ok bool
}

// NewBearer returns a bearer-token authenticator remembering at most size
// answers, accepts for acceptTTL and rejections for negativeTTL.
func NewBearer(r TokenReviewer, acceptTTL, negativeTTL time.Duration, size int) *Bearer {
	return &Bearer{reviewer: r, acceptTTL: acceptTTL, negativeTTL: negativeTTL, cache: lru.New[tokenAnswer](size), now: time.Now}
}

var _ Authenticator = (*Bearer)(nil)

// Authenticate reviews the request's bearer token.
func (b *Bearer) Authenticate(r *http.Request) (Identity, error) {
	token, err := BearerToken(r.Header)
	if err != nil {
		return Identity{}, err
	}
	key := lru.TokenKey(token)
	if a, ok := b.cache.Get(key, b.now()); ok {
		metrics.APIAuthCacheHits.WithLabelValues(reviewToken, outcome(a.ok)).Inc()
		return a.result()
	}
	a, err := coalesce(r.Context(), &b.flight, key, func(ctx context.Context) (tokenAnswer, error) {
		st, err := b.reviewer.ReviewToken(ctx, token)
		if err != nil {
			metrics.APIAuthReviews.WithLabelValues(reviewToken, "error").Inc()
			return tokenAnswer{}, fmt.Errorf("%w: token review on the hub: %w", ErrUnavailable, err)
		}
		a := tokenAnswer{ok: st.Authenticated && st.User.Username != ""}
		metrics.APIAuthReviews.WithLabelValues(reviewToken, outcome(a.ok)).Inc()
		ttl := b.negativeTTL
		if a.ok {
			a.id = Identity{User: st.User.Username, UID: st.User.UID, Groups: st.User.Groups, Extra: extra(st.User.Extra)}
			ttl = b.acceptTTL
		}
		b.cache.Put(key, a, b.now().Add(ttl))
		return a, nil
	})
	if err != nil {
		return Identity{}, err
	}
	return a.result()
}

// coalesce runs fn once for all concurrent callers of one key and waits for
// it only while the caller's ctx lasts: a caller that has gone (a client
// that hung up while the hub is slow) returns at once instead of holding its
// goroutine for the review, and the callers still waiting get the answer.
// fn runs on a context of its own, detached from whichever caller started
// it, so that caller's leaving cancels nobody else's review.
func coalesce[T any](ctx context.Context, g *singleflight.Group, key string, fn func(context.Context) (T, error)) (T, error) {
	detached := context.WithoutCancel(ctx)
	ch := g.DoChan(key, func() (any, error) { return fn(detached) })
	select {
	case <-ctx.Done():
		var zero T
		return zero, fmt.Errorf("%w: the caller left while the hub reviewed: %w", ErrUnavailable, context.Cause(ctx))
	case r := <-ch:
		v, _ := r.Val.(T)
		return v, r.Err
	}
}

func (a tokenAnswer) result() (Identity, error) {
	if !a.ok {
		return Identity{}, fmt.Errorf("%w: the hub did not accept the token", ErrUnauthenticated)
	}
	return a.id, nil
}

func extra(in map[string]authenticationv1.ExtraValue) map[string][]string {
	if len(in) == 0 {
		return nil
	}
	out := make(map[string][]string, len(in))
	for k, v := range in {
		out[k] = []string(v)
	}
	return out
}

// BearerToken extracts the token of an "Authorization: Bearer" header. A
// missing, repeated, oversized or garbled header is ErrUnauthenticated.
func BearerToken(h http.Header) (string, error) {
	vals := h.Values("Authorization")
	switch {
	case len(vals) == 0:
		return "", fmt.Errorf("%w: no bearer token (Authorization: Bearer <hub token>)", ErrUnauthenticated)
	case len(vals) > 1:
		return "", fmt.Errorf("%w: more than one Authorization header", ErrUnauthenticated)
	}
	scheme, token, ok := strings.Cut(vals[0], " ")
	switch {
	case !ok || !strings.EqualFold(scheme, "Bearer"):
		return "", fmt.Errorf("%w: Authorization is not a bearer token", ErrUnauthenticated)
	case len(token) == 0:
		return "", fmt.Errorf("%w: empty bearer token", ErrUnauthenticated)
	case len(token) > MaxTokenBytes:
		return "", fmt.Errorf("%w: bearer token over %d bytes", ErrUnauthenticated, MaxTokenBytes)
	}
	for i := 0; i < len(token); i++ {
		if c := token[i]; c <= ' ' || c >= 0x7f {
			return "", fmt.Errorf("%w: bearer token has a character outside printable ASCII", ErrUnauthenticated)
		}
	}
	return token, nil
}

package apiauth

import (
	"context"
	"fmt"
	"log/slog"
	"math"
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
// are cached apart, keyed by lru.TokenKey of the token. Failed
// authentications spend their source's failure budget (WithFailureBudget);
// an empty one refuses the source's unknown tokens with 429 before they
// cost a review, while tokens the hub accepted keep working.
type Bearer struct {
	reviewer    TokenReviewer
	acceptTTL   time.Duration
	negativeTTL time.Duration
	cache       *lru.Cache[tokenAnswer]
	// known remembers, for knownGoodFor, the tokens the hub accepted: one
	// of them is reviewed again when its accept expired even from a source
	// whose budget is empty, so a flood from a shared address (a NAT, an
	// ingress) does not lock out the users already signed in behind it.
	known    *lru.Cache[struct{}]
	failures *failureBudget
	flight   singleflight.Group
	now      func() time.Time
}

// knownGoodFor is how long a token the hub accepted stays exempt from its
// source's failure budget. An hour covers kubectl's default token lifetime;
// a token the hub stops accepting loses the exemption at its next review.
const knownGoodFor = time.Hour

type tokenAnswer struct {
	id Identity
	ok bool
}

// NewBearer returns a bearer-token authenticator remembering at most size
// answers, accepts for acceptTTL and rejections for negativeTTL. Failures
// are not limited until WithFailureBudget.
func NewBearer(r TokenReviewer, acceptTTL, negativeTTL time.Duration, size int) *Bearer {
	return &Bearer{reviewer: r, acceptTTL: acceptTTL, negativeTTL: negativeTTL, cache: lru.New[tokenAnswer](size),
		known: lru.New[struct{}](size), failures: newFailureBudget(math.Inf(1), 1, 1, nil), now: time.Now}
}

// WithFailureBudget limits the failed authentications of each source
// (SourceKey) to perSecond with burst, remembering at most size sources,
// and returns b. Refusals are logged to log.
func (b *Bearer) WithFailureBudget(perSecond float64, burst, size int, log *slog.Logger) *Bearer {
	b.failures = newFailureBudget(perSecond, burst, size, log)
	return b
}

var _ Authenticator = (*Bearer)(nil)

// Authenticate reviews the request's bearer token. A request without any
// Authorization header costs nothing and is only told how to authenticate
// (the web UI's first call is one); every other failure spends the
// source's budget.
func (b *Bearer) Authenticate(r *http.Request) (Identity, error) {
	source := SourceKey(r)
	token, err := BearerToken(r.Header)
	if err != nil {
		if len(r.Header.Values("Authorization")) == 0 {
			return Identity{}, err
		}
		return Identity{}, b.failed(source, err)
	}
	key := lru.TokenKey(token)
	if a, ok := b.cache.Get(key, b.now()); ok {
		metrics.APIAuthCacheHits.WithLabelValues(reviewToken, outcome(a.ok)).Inc()
		if !a.ok {
			return Identity{}, b.failed(source, a.err())
		}
		return a.id, nil
	}
	return b.reviewBudgeted(r.Context(), source, key, token)
}

// reviewBudgeted reviews a token no cache answers. An unknown token spends
// a failure up front, so concurrent garbage cannot outrun the budget, and
// gets it back when the hub accepts it or does not answer; a known-good one
// is reviewed whatever the budget holds and spends a failure only if the
// hub no longer accepts it.
func (b *Bearer) reviewBudgeted(ctx context.Context, source, key, token string) (Identity, error) {
	now := b.now()
	_, known := b.known.Get(key, now)
	if !known {
		if ok, wait := b.failures.spend(source, now); !ok {
			return Identity{}, b.failures.refuse(source, wait, now)
		}
	}
	a, err := b.review(ctx, key, token)
	switch {
	case err != nil: // no answer is not the caller's failure
		if !known {
			b.failures.refund(source, b.now())
		}
		return Identity{}, err
	case a.ok:
		if !known {
			b.failures.refund(source, b.now())
		}
		b.known.Put(key, struct{}{}, b.now().Add(knownGoodFor))
		return a.id, nil
	}
	if known {
		b.known.Delete(key)
		b.failures.spend(source, b.now()) // the 401 stands even when it is empty
	}
	return Identity{}, a.err()
}

// review asks the hub about token once for all concurrent callers of key
// and caches the answer.
func (b *Bearer) review(ctx context.Context, key, token string) (tokenAnswer, error) {
	cached := func() (tokenAnswer, bool) { return b.cache.Get(key, b.now()) }
	return coalesce(ctx, &b.flight, key, cached, func(ctx context.Context) (tokenAnswer, error) {
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
}

// failed spends a failure of source and returns err, or the budget's 429
// when it was already empty.
func (b *Bearer) failed(source string, err error) error {
	now := b.now()
	if ok, wait := b.failures.spend(source, now); !ok {
		return b.failures.refuse(source, wait, now)
	}
	return err
}

// coalesce runs fn once for all concurrent callers of one key and waits for
// it only while the caller's ctx lasts: a caller that has gone (a client
// that hung up while the hub is slow) returns at once instead of holding its
// goroutine for the review, and the callers still waiting get the answer.
// fn runs on a context of its own, detached from whichever caller started
// it, so that caller's leaving cancels nobody else's review.
//
// A flight first asks cached again: a caller that missed the cache just
// before the previous flight of key stored its answer and ended starts a
// new flight, which finds that answer instead of reviewing it a second time.
func coalesce[T any](ctx context.Context, g *singleflight.Group, key string, cached func() (T, bool), fn func(context.Context) (T, error)) (T, error) {
	detached := context.WithoutCancel(ctx)
	ch := g.DoChan(key, func() (any, error) {
		if v, ok := cached(); ok {
			return v, nil
		}
		return fn(detached)
	})
	select {
	case <-ctx.Done():
		var zero T
		return zero, fmt.Errorf("%w: the caller left while the hub reviewed: %w", ErrUnavailable, context.Cause(ctx))
	case r := <-ch:
		v, _ := r.Val.(T)
		return v, r.Err
	}
}

// err is the refusal of a token the hub did not accept.
func (a tokenAnswer) err() error {
	return fmt.Errorf("%w: the hub did not accept the token", ErrUnauthenticated)
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

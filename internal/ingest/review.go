package ingest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"crucible.dev/crucible/internal/metrics"
	"crucible.dev/crucible/internal/store"
)

const (
	extraPodName = "authentication.kubernetes.io/pod-name"
	extraPodUID  = "authentication.kubernetes.io/pod-uid"
)

// verdict is the authentication decision for one request.
type verdict int

const (
	accepted     verdict = iota
	unauthorized         // 401: the spoke does not authenticate the token
	forbidden            // 403: authenticated, but not as this pod's turn service account
	unbound              // 503: this pod's token, but the row has no pod uid yet to bind it to
	// Decided without a TokenReview (refuseFinal), cached as unauthorized
	// and forbidden are.
	otherIssuer // 401: the token's iss is not its cluster's issuer
	otherPod    // 403: the token is bound to a pod uid other than the row's (a re-created pod's predecessor)
)

// errReviewUnavailable: the spoke gave no answer (unreachable, timeout,
// error status). Answered 503 and never cached (R-IN4).
var errReviewUnavailable = errors.New("token review unavailable")

// reviewResult is the part of a TokenReview's status the decision needs.
// It depends on the token and the cluster only, so concurrent reviews of the
// same token on the same cluster share one.
type reviewResult struct {
	authenticated bool
	audiences     []string
	username      string
	podName       []string
	podUID        []string
}

// decide applies R-IN3 to a review of a token presented for pod (row).
//
// A live row without a pod uid is one whose pod the controller created but
// has not recorded yet — a controller killed between the create and the
// write, or a pod that pushes before the watch reports it. Its push cannot
// be bound to the pod yet, but will be within seconds: unbound (503), never
// cached, never 403, which would fail the pod's push for good.
func (c *cluster) decide(res reviewResult, row store.WorkPod) verdict {
	if !res.authenticated {
		return unauthorized
	}
	if !slices.Contains(res.audiences, c.Audience) ||
		res.username != "system:serviceaccount:"+c.Namespace+":"+c.ServiceAccount ||
		!slices.Equal(res.podName, []string{row.ID}) {
		return forbidden
	}
	switch {
	case row.PodUID == "" && row.State.Live() && len(res.podUID) == 1:
		return unbound
	case row.PodUID == "" || !slices.Equal(res.podUID, []string{row.PodUID}):
		return forbidden
	}
	return accepted
}

// acceptEntry is a cached acceptance; the pod uid it was checked against is
// compared with the row's, so a recreated pod is reviewed afresh.
type acceptEntry struct{ podUID string }

// Cache keys. The accept cache is keyed by token, pod and cluster; the
// negative cache by token and cluster for "not authenticated", and by token,
// cluster, pod and uid for "authenticated as somebody else".
func acceptKey(hash, pod, cluster string) string { return hash + "\x00" + pod + "\x00" + cluster }
func unauthKey(hash, cluster string) string      { return hash + "\x00" + cluster }
func forbidKey(hash, cluster string, row store.WorkPod) string {
	return hash + "\x00" + cluster + "\x00" + row.ID + "\x00" + row.PodUID
}

// authenticate decides whether token (hash is its sha256, hex) may push for
// row on cluster c: from the caches, from what the pre-check verified
// (pc) when that is final, or by a TokenReview on c coalesced with
// identical reviews in flight.
func (h *Handler) authenticate(ctx context.Context, c *cluster, row store.WorkPod, token, hash string, pc prechecked) (verdict, error) {
	now := h.opts.Now()
	if e, ok := h.accept.Get(acceptKey(hash, row.ID, c.Name), now); ok && e.podUID == row.PodUID {
		metrics.IngestCacheHits.WithLabelValues("accept").Inc()
		return accepted, nil
	}
	if v, ok := h.negativeGet(hash, c.Name, row, now); ok {
		metrics.IngestCacheHits.WithLabelValues("negative").Inc()
		return v, nil
	}
	if v, reason, ok := refuseFinal(ctx, c, row, pc); ok {
		metrics.IngestPrecheckRejects.WithLabelValues(reason).Inc()
		h.cache(c, row, hash, pc.exp, v)
		return v, nil
	}
	res, err := h.flights.do(ctx, unauthKey(hash, c.Name), func() (reviewResult, error) {
		res, err := h.tokenReview(ctx, c, token)
		if err == nil {
			// Cache the leader's decision before the flight ends, so no
			// request can slip between the flight and the cache.
			h.remember(c, row, hash, pc.exp, res)
		}
		return res, err
	})
	if err != nil {
		return 0, err
	}
	return h.remember(c, row, hash, pc.exp, res), nil
}

// refuseFinal refuses, without a TokenReview, a token that c's review
// could never accept for row but would refuse with status.error (kube-
// apiserver's wording for both), which reads as an outage: a token of
// another issuer, or one bound to a pod uid other than the row's. reason
// is the refusal's label in crucible_ingest_precheck_rejects_total. A row
// without a uid yet is left to the review (decide's unbound).
func refuseFinal(ctx context.Context, c *cluster, row store.WorkPod, pc prechecked) (v verdict, reason string, ok bool) {
	switch {
	case c.issuer.refuses(ctx, pc.issuer):
		return otherIssuer, "issuer", true
	case row.PodUID != "" && pc.podUID != row.PodUID:
		return otherPod, "pod_uid", true
	}
	return 0, "", false
}

func (h *Handler) negativeGet(hash, cluster string, row store.WorkPod, now time.Time) (verdict, bool) {
	if _, ok := h.negative.Get(unauthKey(hash, cluster), now); ok {
		return unauthorized, true
	}
	if _, ok := h.negative.Get(forbidKey(hash, cluster, row), now); ok {
		return forbidden, true
	}
	return 0, false
}

// remember decides res for row and caches the decision.
func (h *Handler) remember(c *cluster, row store.WorkPod, hash string, exp time.Time, res reviewResult) verdict {
	v := c.decide(res, row)
	h.cache(c, row, hash, exp, v)
	return v
}

// cache records verdict v of token hash for row on c. A token of another
// issuer is refused on c whatever the pod, as an unauthenticated one is; a
// token bound to another pod only for this row's uid, as one of another
// identity is.
func (h *Handler) cache(c *cluster, row store.WorkPod, hash string, exp time.Time, v verdict) {
	now := h.opts.Now()
	switch v {
	case accepted:
		until := now.Add(h.opts.AcceptTTL)
		if exp.Before(until) {
			until = exp
		}
		h.accept.Put(acceptKey(hash, row.ID, c.Name), acceptEntry{podUID: row.PodUID}, until)
	case unauthorized, otherIssuer:
		h.negative.Put(unauthKey(hash, c.Name), struct{}{}, now.Add(h.opts.NegativeTTL))
	case forbidden, otherPod:
		h.negative.Put(forbidKey(hash, c.Name, row), struct{}{}, now.Add(h.opts.NegativeTTL))
	}
	// unbound is not cached: the next request reads the row afresh.
}

// tokenReview asks cluster c whether token is authenticated for the ingest
// audience. Any failure to get an answer wraps errReviewUnavailable, and so
// does an answer carrying status.error, whether or not authenticated is
// false: kube-apiserver reports an authenticator it could not consult (a
// webhook down, keys it could not load) that way, and a cached "no" would
// lock a live pod out. kube-apiserver also words some definitive
// rejections as errors; the two a token its keys signed can meet — another
// issuer, a pod uid not the row's — are refused before any review
// (refuseFinal), and the pod's row state bounds how long any other can be
// retried, so it costs a review per request rather than a wrong 401.
func (h *Handler) tokenReview(ctx context.Context, c *cluster, token string) (reviewResult, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.reviewTimeout)
	defer cancel()
	tr, err := c.Client.Kube.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: token, Audiences: []string{c.Audience}},
	}, metav1.CreateOptions{})
	if err != nil {
		metrics.IngestTokenReviews.WithLabelValues(c.Name, "error").Inc()
		return reviewResult{}, fmt.Errorf("%w: cluster %s: %w", errReviewUnavailable, c.Name, err)
	}
	st := tr.Status
	if st.Error != "" {
		metrics.IngestTokenReviews.WithLabelValues(c.Name, "error").Inc()
		return reviewResult{}, fmt.Errorf("%w: cluster %s: status.error %.200q", errReviewUnavailable, c.Name, st.Error)
	}
	if !st.Authenticated {
		metrics.IngestTokenReviews.WithLabelValues(c.Name, "rejected").Inc()
		return reviewResult{}, nil
	}
	metrics.IngestTokenReviews.WithLabelValues(c.Name, "authenticated").Inc()
	return reviewResult{
		authenticated: true,
		audiences:     st.Audiences,
		username:      st.User.Username,
		podName:       st.User.Extra[extraPodName],
		podUID:        st.User.Extra[extraPodUID],
	}, nil
}

// flights coalesces identical TokenReviews: one in flight per key, the
// others wait for its answer.
type flights struct {
	mu      sync.Mutex
	m       map[string]*flight
	waiting atomic.Int64 // requests waiting on another's review (tests watch it)
}

type flight struct {
	done chan struct{}
	res  reviewResult
	err  error
}

// do runs fn unless a call with the same key is in flight, and returns its
// result. fn runs in its own goroutine, so a leader whose client hangs up
// does not fail the waiters; every caller waits at most until its ctx ends.
func (g *flights) do(ctx context.Context, key string, fn func() (reviewResult, error)) (reviewResult, error) {
	g.mu.Lock()
	f, ok := g.m[key]
	if !ok {
		if g.m == nil {
			g.m = make(map[string]*flight)
		}
		f = &flight{done: make(chan struct{})}
		g.m[key] = f
		go func() {
			f.res, f.err = fn()
			g.mu.Lock()
			delete(g.m, key)
			g.mu.Unlock()
			close(f.done)
		}()
	} else {
		g.waiting.Add(1)
		defer g.waiting.Add(-1)
	}
	g.mu.Unlock()
	select {
	case <-f.done:
		return f.res, f.err
	case <-ctx.Done():
		return reviewResult{}, fmt.Errorf("%w: %w", errReviewUnavailable, ctx.Err())
	}
}

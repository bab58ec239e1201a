package metrics

import "github.com/prometheus/client_golang/prometheus"

// Metrics of the API's authentication and authorization (internal/apiauth).
var (
	// APIAuthReviews counts reviews sent to the hub. A rise of error means
	// the hub cannot answer and API callers get 503; caches keep the count
	// far below the request rate.
	APIAuthReviews = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "crucible_api_auth_reviews_total",
		Help: "Reviews the API sent to the hub. review: tokenreview, subjectaccessreview. result: allowed (authenticated or allowed), denied (not authenticated or not allowed), error (no answer; answered 503, never cached).",
	}, []string{"review", "result"})

	// APIAuthCacheHits counts decisions taken from a cache without a review.
	APIAuthCacheHits = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "crucible_api_auth_cache_hits_total",
		Help: "API auth decisions answered from a cache. review: tokenreview, subjectaccessreview. result: allowed, denied.",
	}, []string{"review", "result"})
)

func init() {
	Registry.MustRegister(APIAuthReviews, APIAuthCacheHits)
}

package metrics

import "github.com/prometheus/client_golang/prometheus"

// Metrics of the drop-box (internal/ingest).
var (
	// IngestRequests counts every answer of the drop-box by outcome. A rise
	// of unavailable means a spoke API is unreachable (pods retry); a rise
	// of unauthorized, forbidden or rate_limited is somebody knocking.
	IngestRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "crucible_ingest_requests_total",
		Help: "Answers of the drop-box. outcome: created (201), duplicate (200, same bytes again), conflict (409, other bytes for a stored kind), " +
			"unauthorized (401), forbidden (403), unavailable (503: spoke API or keys unavailable, or a storage error), rate_limited (429), " +
			"bad_request (400, 404 or 405: malformed method, path or name), too_large (413), reserved (403: a controller-owned kind), " +
			"quota (413: the pod's kinds or bytes), insufficient_storage (507: the volume's free-space floor), busy (429: the pod's staging bound), " +
			"timeout (408: the body fell below the minimum upload rate).",
	}, []string{"outcome"})

	// IngestTokenReviews counts TokenReviews the drop-box sent to spokes;
	// caches and the local pre-check keep it far below the request rate.
	IngestTokenReviews = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "crucible_ingest_tokenreviews_total",
		Help: "TokenReviews sent by the drop-box. result: authenticated, rejected (authenticated false), error (no answer or an error status; answered 503, never cached).",
	}, []string{"cluster", "result"})

	// IngestCacheHits counts requests answered from a cache without a
	// TokenReview.
	IngestCacheHits = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "crucible_ingest_cache_hits_total",
		Help: "Drop-box requests whose token was decided from a cache. cache: accept (a recent successful review of the same token, pod and cluster), negative (a recent rejection of the same token), unknown_pod (a pod id the store did not know within negative_ttl).",
	}, []string{"cache"})

	// IngestPrecheckRejects counts tokens refused locally, before any
	// TokenReview.
	IngestPrecheckRejects = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "crucible_ingest_precheck_rejects_total",
		Help: "Tokens the drop-box refused without a TokenReview. reason: too_large, malformed, alg, crit, expired, not_yet_valid, audience, signature, cluster (signed by another cluster than the pod's), issuer (not the pod's cluster's), pod_uid (bound to another pod uid than the row's), " +
			"pod_name (bound to another pod than the request's, refused before the store is read), refused_reads (a token or pod uid past its budget of requests refused after a store read).",
	}, []string{"reason"})

	// IngestStoreReads counts the drop-box's reads of a pod's row to decide
	// a request: what a replayed token costs the store once the pre-check
	// and the caches let it through.
	IngestStoreReads = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "crucible_ingest_store_reads_total",
		Help: "Reads of a work pod's row by the drop-box's authorization. A token bound to another pod than the one it is sent for, an unknown pod id seen recently and a token or pod uid over its refusal budget are refused without one.",
	})
)

func init() {
	Registry.MustRegister(IngestRequests, IngestTokenReviews, IngestCacheHits, IngestPrecheckRejects, IngestStoreReads)
}

package metrics

import "github.com/prometheus/client_golang/prometheus"

// Metrics of the spoke authn webhook (package internal/webhook).
var (
	// WebhookReviews counts TokenReviews answered, by provider and result.
	WebhookReviews = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "crucible_webhook_reviews_total",
		Help: "TokenReviews answered by the authn webhook. provider is the provider whose issuer " +
			"matched the token (empty when none did or the token was malformed); result is " +
			"authenticated, rejected (a definitive no, which kube-apiserver caches) or error " +
			"(the provider's keys were unavailable; kube-apiserver does not cache it).",
	}, []string{"provider", "result"})

	// WebhookReviewDuration is the time to answer one TokenReview.
	WebhookReviewDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "crucible_webhook_review_duration_seconds",
		Help: "Time the authn webhook took to answer a TokenReview, from decoded request to " +
			"encoded answer, by result (authenticated, rejected, error). Includes any JWKS fetch " +
			"the review triggered.",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
	}, []string{"result"})

	// WebhookJWKSFetches counts fetches of a provider's discovery document and key set.
	WebhookJWKSFetches = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "crucible_webhook_jwks_fetches_total",
		Help: "Fetches of a provider's keys by the authn webhook (the discovery document, then " +
			"the JWKS at its jwks_uri), by provider and result (success or failure). Fetches " +
			"happen on first use, on a token with an unknown key id, from /readyz, and (with " +
			"--state-dir) in the background when a review used persisted keys or keys older than " +
			"min(maxKeyAge/4, 1h); at most " +
			"once per jwksMinRefreshInterval per provider.",
	}, []string{"provider", "result"})

	// WebhookKeyAge is the age of each provider's keys, by where they come from.
	WebhookKeyAge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "crucible_webhook_key_age_seconds",
		Help: "Seconds since the authn webhook's keys of a provider were fetched, by provider and " +
			"source: fetched (by this process) or persisted (read from --state-dir at start and " +
			"used because fetching fails; trusted up to the provider's maxKeyAge). No series " +
			"while a provider has no keys. Computed at each scrape.",
	}, []string{"provider", "source"})

	// WebhookConfigReloadFailures counts rejected configuration reloads.
	WebhookConfigReloadFailures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "crucible_webhook_config_reload_failures_total",
		Help: "Changed authn webhook configuration files that could not be loaded (invalid, " +
			"unreadable, or an authenticator failed to build); the previous configuration " +
			"keeps serving.",
	})

	// WebhookConfigLastReloadSuccess is 1 when the last configuration load succeeded.
	WebhookConfigLastReloadSuccess = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "crucible_webhook_config_last_reload_success",
		Help: "1 if the authn webhook's last attempt to load its configuration file succeeded, " +
			"0 if it failed and an older configuration is still serving.",
	})
)

func init() {
	Registry.MustRegister(
		WebhookReviews,
		WebhookReviewDuration,
		WebhookJWKSFetches,
		WebhookKeyAge,
		WebhookConfigReloadFailures,
		WebhookConfigLastReloadSuccess,
	)
}

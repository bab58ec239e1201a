package webhook

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"crucible.dev/crucible/internal/metrics"
)

// results are every review result, as in metrics.
var results = []string{resultAuthenticated, resultRejected, resultError}

// reviewMetrics are a configuration's review series, resolved when it is
// built: WithLabelValues hashes its labels and allocates on every call,
// which the hot path can do without.
type reviewMetrics struct {
	reviews  map[reviewLabels]prometheus.Counter
	duration map[string]prometheus.Observer
}

type reviewLabels struct{ provider, result string }

func newReviewMetrics(providers []*provider) reviewMetrics {
	m := reviewMetrics{reviews: map[reviewLabels]prometheus.Counter{}, duration: map[string]prometheus.Observer{}}
	names := []string{""} // no provider: malformed or unrouted tokens
	for _, p := range providers {
		names = append(names, p.name)
	}
	for _, result := range results {
		m.duration[result] = metrics.WebhookReviewDuration.WithLabelValues(result)
		for _, name := range names {
			m.reviews[reviewLabels{name, result}] = metrics.WebhookReviews.WithLabelValues(name, result)
		}
	}
	return m
}

// observe counts one review and its duration.
func (s *snapshot) observe(out outcome, took time.Duration) {
	if c, ok := s.metrics.reviews[reviewLabels{out.provider, out.result}]; ok {
		c.Inc()
	} else { // not a result of this configuration; cannot happen
		metrics.WebhookReviews.WithLabelValues(out.provider, out.result).Inc()
	}
	if o, ok := s.metrics.duration[out.result]; ok {
		o.Observe(took.Seconds())
	}
}

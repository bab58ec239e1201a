package webhook

import (
	"net/http"
	"sync"
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

// keyAgeMu keeps one scrape's reset and sets whole.
var keyAgeMu sync.Mutex

// withKeyAges sets the key-age gauge before each scrape: an age grows
// between fetches, so it is computed when read. Providers without keys,
// and sources no longer in use, have no series.
func (s *Server) withKeyAges(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		keyAgeMu.Lock()
		metrics.WebhookKeyAge.Reset()
		for _, p := range s.current.Load().providers {
			if source, age, ok := p.keys.source(); ok {
				metrics.WebhookKeyAge.WithLabelValues(p.name, source).Set(age.Seconds())
			}
		}
		keyAgeMu.Unlock()
		next.ServeHTTP(w, r)
	})
}

package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics of the OIDC discovery mirror (internal/mirror). The label
// "document" is "discovery" (/.well-known/openid-configuration) or "jwks"
// (/openid/v1/jwks).
var (
	// MirrorUpstreamFetches counts fetches from the hub API. An operator
	// alerts on a rising error or invalid rate: past the configured staleness
	// the spokes can no longer validate the controller's tokens.
	MirrorUpstreamFetches = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "crucible_mirror_upstream_fetches_total",
		Help: "Fetches of an OIDC document from the hub API by the discovery mirror. " +
			"result: ok (a valid document was cached), error (no answer: connection, TLS or timeout), " +
			"invalid (an answer that is not a usable document: non-200 status, too large, not JSON, required fields missing); " +
			"neither error nor invalid replaces the last good document. " +
			"A fetch whose first answer is 401 asks once more with the token file re-read, and counts once.",
	}, []string{"document", "result"})

	// MirrorResponses counts the mirror's answers to clients by where the
	// document came from.
	MirrorResponses = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "crucible_mirror_responses_total",
		Help: "Answers of the discovery mirror to GET and HEAD requests. " +
			"source: fresh (a document younger than the TTL), stale (the last good document, past its TTL but within the allowed staleness, because the hub API failed), " +
			"unavailable (503: no good document within the allowed staleness).",
	}, []string{"document", "source"})

	// MirrorDocumentAge is computed at scrape time, so it stays current while
	// no client asks for a document.
	MirrorDocumentAge = newScrapedGaugeVec(prometheus.NewDesc(
		"crucible_mirror_document_age_seconds",
		"Seconds since the discovery mirror last fetched a good copy of the document from the hub API, as of the scrape. "+
			"Absent until the first good fetch. Above the TTL means the mirror is serving a stale copy; "+
			"above TTL plus the maximum staleness it answers 503.",
		[]string{"document"}, nil))
)

func init() {
	Registry.MustRegister(MirrorUpstreamFetches, MirrorResponses, MirrorDocumentAge)
}

// ScrapedGaugeVec is a gauge whose value per label is read from a function at
// every scrape, for values such as ages that change without events.
type ScrapedGaugeVec struct {
	desc *prometheus.Desc

	mu  sync.Mutex
	fns map[string]func() (float64, bool)
}

var _ prometheus.Collector = (*ScrapedGaugeVec)(nil)

func newScrapedGaugeVec(desc *prometheus.Desc) *ScrapedGaugeVec {
	return &ScrapedGaugeVec{desc: desc, fns: map[string]func() (float64, bool){}}
}

// Track makes the series with the given label value report fn at every
// scrape; fn returns false while there is nothing to report, and the series
// is then absent. A later call for the same label value replaces the earlier
// one, so the last component constructed owns the series.
func (g *ScrapedGaugeVec) Track(labelValue string, fn func() (float64, bool)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.fns[labelValue] = fn
}

// Describe implements prometheus.Collector.
func (g *ScrapedGaugeVec) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

// Collect implements prometheus.Collector.
func (g *ScrapedGaugeVec) Collect(ch chan<- prometheus.Metric) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for label, fn := range g.fns {
		if v, ok := fn(); ok {
			ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, v, label)
		}
	}
}

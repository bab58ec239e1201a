// Package metrics owns crucible's Prometheus registry and every metric in it.
// Each component has a file here that declares and documents its metrics; no
// other package registers metrics of its own, so /metrics lists exactly what
// this package documents.
package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Registry holds crucible's metrics plus the Go runtime and process
// collectors. It is a package variable because metrics are process-wide; tests
// read it with prometheus/testutil.
var Registry = prometheus.NewRegistry()

func init() {
	Registry.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
}

// Handler serves the registry in the Prometheus text format.
func Handler() http.Handler {
	return promhttp.HandlerFor(Registry, promhttp.HandlerOpts{Registry: Registry})
}

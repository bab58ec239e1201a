package metrics

import "github.com/prometheus/client_golang/prometheus"

// Budget refusal metrics (issue 23): what a budget on memory or streams
// refused, so an operator can tell an attack from a budget set too tight.
var (
	// BudgetRefusals counts refusals by the budget that made them.
	BudgetRefusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "crucible_budget_refusals_total",
		Help: "Requests, streams or sessions a budget refused or cut, by budget: live_viewers and live_viewers_per_identity (a live-log stream answered 429), live_viewer_buffer (a viewer dropped for falling [live] buffer or viewer_buffer_bytes behind), sse_write_timeout (an SSE client cut for not taking a write within [live] write_timeout), events_queue (a GET /api/events subscriber dropped for falling [events] queue or queue_bytes behind), events_streams and events_streams_per_identity (an event stream answered 429), api_auth_failures (a source past [api] auth_failures_per_source answered 429 without a TokenReview), run_live_sessions and run_live_sessions_per_identity (a port-forward session answered 429), run_live_opens_per_identity (a caller past [run_live] opens_per_minute answered 429), run_live_write_timeout (a session cut for a side not taking a write within [run_live] write_timeout).",
	}, []string{"budget"})
)

func init() { Registry.MustRegister(BudgetRefusals) }

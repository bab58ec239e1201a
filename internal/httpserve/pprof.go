package httpserve

import (
	"net/http"
	"net/http/pprof"
)

// HandlePprof serves Go's profiler under /debug/pprof/ on mux: the index
// (and through it every named profile: heap, goroutine, allocs, ...),
// cmdline, CPU profile, symbol and trace. The webhook's metrics listener and
// the controller's --pprof-listen share it.
func HandlePprof(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}

// PprofHandler is a listener of the profiler alone; every other path is 404.
func PprofHandler() http.Handler {
	mux := http.NewServeMux()
	HandlePprof(mux)
	return mux
}

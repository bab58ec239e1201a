package cli

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"

	"crucible.dev/crucible/internal/urlcheck"
)

// handlePprof serves Go's profiler under /debug/pprof/ on mux: the index
// (and through it every named profile: heap, goroutine, allocs, ...),
// cmdline, CPU profile, symbol and trace. The webhook's metrics listener and
// the controller's --pprof-listen share it.
func handlePprof(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}

// pprofHandler is a listener of the profiler alone; every other path is 404.
func pprofHandler() http.Handler {
	mux := http.NewServeMux()
	handlePprof(mux)
	return mux
}

// errPprofNotLoopback refuses a profiler reachable from elsewhere.
var errPprofNotLoopback = errors.New("must be a loopback address (127.0.0.1, ::1 or localhost): " +
	"a heap profile holds the process's memory, tokens included")

// pprofListenError reports what is wrong with addr as --pprof-listen: it
// must be HOST:PORT with a loopback host and a port from 1 to 65535. Plain
// HTTP with no authentication is safe only where nothing else reaches it.
func pprofListenError(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--pprof-listen %q: want HOST:PORT: %w", addr, err)
	}
	if !urlcheck.LoopbackHost(host) {
		return fmt.Errorf("--pprof-listen %q: %w", addr, errPprofNotLoopback)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fmt.Errorf("--pprof-listen %q: port must be a number from 1 to 65535", addr)
	}
	return nil
}

package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"crucible.dev/crucible/internal/httpserve"
	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/urlcheck"
)

// NewCommand is `crucible controller`. It lives with the controller, not in
// the CLI's package, so that the client commands link none of the server.
func NewCommand() *cobra.Command {
	var (
		config      string
		leaderElect bool
		pprofListen string
	)
	cmd := &cobra.Command{
		Use:   "controller --config crucible.toml",
		Short: "Run the hub controller: dispatch, watch and collect work pods on the spokes",
		Long: `controller runs crucible's hub controller from a profile (see examples/crucible.toml
and docs/config.md). It holds no credential for any spoke besides its own
projected service-account token per spoke (token_file, re-read as it rotates).

Two listeners:

  internal  the JSON API (/api/pods, /api/clusters, ...), /healthz, /readyz, /metrics
  external  the route spokes reach: GET /.well-known/openid-configuration and
            GET /openid/v1/jwks, proxied from the hub API with the controller's own
            identity (issuer unchanged, jwks_uri rewritten to external_url); all
            else is 404

A spoke's crucible authn-webhook uses external_url + /.well-known/openid-configuration
as its discoveryURL, because the hub's issuer is not publicly discoverable.

Several replicas (HA) share one PostgreSQL store with --leader-elect (or
[controller] leader_elect): every replica serves the API, the drop-box, the mirror
and live logs, and keeps artifacts in PostgreSQL; each spoke's await, log collection,
startup reconcile and sweep run on the replica holding that spoke's hub Lease
(<lease_name>-spoke-<cluster>), the spokes spread evenly over the live replicas, every
store write of them fenced by the Lease's epoch. A replica that loses a spoke's Lease
stops that spoke's loops. With [leader_election] single_leader one replica, the holder
of one Lease, runs them all, and exits if it loses it. SQLite serves one replica only.

The profile is reloaded when the file changes (checked every 2 s) and on SIGHUP.
A reload applies [[clusters]], default_cluster and [[pods.classes]] only: a spoke
added gets its loops, drop-box validator and health probe; a changed one moves to a
new client; a removed one drains (no new dispatch; live pods followed to their end,
or lost after [reconcile] drain_timeout). A file that does not validate, or that
changes any other key ("restart needed for <key>"), is refused whole and logged; the
running controller keeps what it has. The process never restarts for a reload.

With --pprof-listen HOST:PORT the controller also serves Go's profiler
(/debug/pprof/: heap, allocs, goroutine, profile, trace, ...) over plain HTTP
on a listener of its own, off by default. HOST must be loopback (127.0.0.1,
::1 or localhost): a heap profile holds the process's memory, tokens included.
Like the metrics listener it answers only a Host that is an IP literal or one
of [controller] metrics_allowed_hosts (421 otherwise), so a web page cannot
read it by rebinding its own name to 127.0.0.1. Reach it through kubectl
port-forward, e.g.
  go tool pprof http://127.0.0.1:6060/debug/pprof/heap`,
		Example: `  crucible controller --config /etc/crucible/crucible.toml
  crucible controller --config crucible.toml --pprof-listen 127.0.0.1:6060`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if pprofListen != "" {
				if err := pprofListenError(pprofListen); err != nil {
					return err
				}
			}
			load := func(path string) (*profile.Profile, error) {
				p, err := profile.Load(path)
				if err != nil || !leaderElect || p.Controller.LeaderElect {
					return p, err
				}
				p.Controller.LeaderElect = true
				if err := p.Validate(); err != nil {
					return nil, fmt.Errorf("--leader-elect: %w", err)
				}
				return p, nil
			}
			p, err := load(config)
			if err != nil {
				return err
			}
			log := slog.New(slog.NewJSONHandler(cmd.ErrOrStderr(), nil))
			return runController(cmd.Context(), p, &ProfileSource{Path: config, Load: load}, pprofListen, log)
		},
	}
	cmd.Flags().StringVar(&config, "config", "crucible.toml", "the controller's profile (TOML)")
	cmd.Flags().BoolVar(&leaderElect, "leader-elect", false, "share the spokes' reconcile loops with the other replicas by a hub Lease per spoke (several replicas on PostgreSQL); same as [controller] leader_elect")
	cmd.Flags().StringVar(&pprofListen, "pprof-listen", "", "loopback HOST:PORT to serve Go's profiler (/debug/pprof/) on, plain HTTP; off when empty")
	return cmd
}

// runController runs the controller and, when pprofListen is set, Go's
// profiler beside it (withPprof).
func runController(ctx context.Context, p *profile.Profile, src *ProfileSource, pprofListen string, log *slog.Logger) error {
	run := func(ctx context.Context) error { return Run(ctx, p, log, src) }
	if pprofListen == "" {
		return run(ctx)
	}
	return withPprof(ctx, pprofListen, p.Controller.MetricsAllowedHosts, log, run)
}

// withPprof runs run with Go's profiler served on addr, a listener of its
// own (never the API's or the spokes' listeners, which carry tokens), to a
// Host that is an IP literal or one of hosts (httpserve.RequireHost). They
// end together: run's return stops the profiler, and a profiler that cannot
// listen stops run — it was asked for.
func withPprof(ctx context.Context, addr string, hosts []string, log *slog.Logger, run func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer cancel()
		return run(gctx)
	})
	g.Go(func() error {
		// No write timeout: a CPU profile or trace writes for as long as
		// its ?seconds= asks.
		opts := httpserve.Options{Name: "pprof", Addr: addr, InsecureHTTP: true}
		h := httpserve.RequireHost(hosts, MetricsAllowedHostsKey, httpserve.PprofHandler())
		if err := httpserve.ListenAndServe(gctx, opts, h, log); err != nil {
			return fmt.Errorf("--pprof-listen: %w", err)
		}
		return nil
	})
	return g.Wait()
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

package cli

import (
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"crucible.dev/crucible/internal/controller"
	"crucible.dev/crucible/internal/fleet"
)

func newControllerCmd() *cobra.Command {
	var (
		config      string
		leaderElect bool
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
and live logs, and keeps artifacts in PostgreSQL; the replica holding the hub Lease
[leader_election] runs await, log collection, startup reconcile and the sweep. A
leader that loses its lease stops those loops and exits non-zero, to restart as a
follower. SQLite serves one replica only.`,
		Example: `  crucible controller --config /etc/crucible/crucible.toml`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := fleet.Load(config)
			if err != nil {
				return err
			}
			if leaderElect && !p.Controller.LeaderElect {
				p.Controller.LeaderElect = true
				if err := p.Validate(); err != nil {
					return fmt.Errorf("--leader-elect: %w", err)
				}
			}
			log := slog.New(slog.NewJSONHandler(cmd.ErrOrStderr(), nil))
			return controller.Run(cmd.Context(), p, log)
		},
	}
	cmd.Flags().StringVar(&config, "config", "crucible.toml", "the controller's profile (TOML)")
	cmd.Flags().BoolVar(&leaderElect, "leader-elect", false, "run the reconcile loops only while holding the hub Lease (several replicas on PostgreSQL); same as [controller] leader_elect")
	return cmd
}

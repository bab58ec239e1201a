package cli

import (
	"log/slog"

	"github.com/spf13/cobra"

	"crucible.dev/crucible/internal/controller"
	"crucible.dev/crucible/internal/fleet"
)

func newControllerCmd() *cobra.Command {
	var config string
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
as its discoveryURL, because the hub's issuer is not publicly discoverable.`,
		Example: `  crucible controller --config /etc/crucible/crucible.toml`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := fleet.Load(config)
			if err != nil {
				return err
			}
			log := slog.New(slog.NewJSONHandler(cmd.ErrOrStderr(), nil))
			return controller.Run(cmd.Context(), p, log)
		},
	}
	cmd.Flags().StringVar(&config, "config", "crucible.toml", "the controller's profile (TOML)")
	return cmd
}

package cli

import (
	"log/slog"

	"github.com/spf13/cobra"

	"crucible.dev/crucible/internal/controller"
)

func newControllerCmd() *cobra.Command {
	var cfg controller.Config
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Run the hub controller (today: the OIDC discovery mirror, health and metrics)",
		Long: `controller runs crucible's hub controller with two listeners:

  internal  /healthz, /readyz, /metrics (the API and UI join here)
  external  the route spokes reach: GET /.well-known/openid-configuration and
            GET /openid/v1/jwks, proxied from the hub API with the controller's own
            service-account token, issuer unchanged and jwks_uri rewritten to
            --external-url; everything else is 404

A spoke's crucible authn-webhook uses --external-url + /.well-known/openid-configuration
as its discoveryURL, because the hub's issuer (https://kubernetes.default.svc) is
not publicly discoverable.

Without --hub-server the controller uses its in-cluster identity. A listener
without a TLS certificate serves plain HTTP, which is only allowed on loopback.`,
		Example: `  crucible controller --hub-server https://127.0.0.1:6443 --hub-ca-file ca.crt \
    --hub-token-file token --external-listen 127.0.0.1:8443 \
    --external-tls-cert tls.crt --external-tls-key tls.key \
    --external-url https://127.0.0.1:8443`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Internal.InsecureHTTP = cfg.Internal.TLSCert == "" && cfg.Internal.TLSKey == ""
			cfg.External.InsecureHTTP = cfg.External.TLSCert == "" && cfg.External.TLSKey == ""
			log := slog.New(slog.NewJSONHandler(cmd.ErrOrStderr(), nil))
			return controller.Run(cmd.Context(), cfg, log)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Hub.Server, "hub-server", "", "hub API URL (default: in-cluster)")
	f.StringVar(&cfg.Hub.CAFile, "hub-ca-file", "", "CA bundle that verifies the hub API")
	f.StringVar(&cfg.Hub.TokenFile, "hub-token-file", "", "the controller's service-account token for the hub audience; re-read as it rotates")
	f.StringVar(&cfg.Internal.Listen, "internal-listen", "127.0.0.1:8080", "address of the internal listener")
	f.StringVar(&cfg.Internal.TLSCert, "internal-tls-cert", "", "serving certificate of the internal listener (PEM)")
	f.StringVar(&cfg.Internal.TLSKey, "internal-tls-key", "", "key of the internal listener's certificate (PEM)")
	f.StringVar(&cfg.External.Listen, "external-listen", "127.0.0.1:8443", "address of the external listener")
	f.StringVar(&cfg.External.TLSCert, "external-tls-cert", "", "serving certificate of the external listener (PEM)")
	f.StringVar(&cfg.External.TLSKey, "external-tls-key", "", "key of the external listener's certificate (PEM)")
	f.StringVar(&cfg.ExternalURL, "external-url", "", "base URL at which spokes reach the external listener (required)")
	f.DurationVar(&cfg.Mirror.TTL, "mirror-ttl", 0, "how long a fetched discovery document is served as fresh (default 30s)")
	f.DurationVar(&cfg.Mirror.MaxStale, "mirror-max-stale", 0, "how long past its TTL the last good document is served while the hub API fails (default 10m)")
	return cmd
}

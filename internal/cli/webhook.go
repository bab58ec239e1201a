package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/clientcmd"

	"crucible.dev/crucible/internal/httpserve"
	"crucible.dev/crucible/internal/webhook"
)

func newWebhookCmd() *cobra.Command {
	var (
		configFile     string
		stateDir       string
		stateConfigMap string
		kubeconfig     string
		serve          = httpserve.Options{Name: "webhook", WriteTimeout: 40 * time.Second} // kube-apiserver gives up after 30 s
		ops            = httpserve.Options{Name: "webhook-metrics", InsecureHTTP: true, NoCredentials: true, WriteTimeout: 30 * time.Second}
		reloadInterval time.Duration
		noClientAuth   bool
		withPprof      bool
		opsHosts       []string
	)
	cmd := &cobra.Command{
		Use:   "authn-webhook",
		Short: "Serve the spoke's token authentication webhook (TokenReview) for hub-issued tokens",
		Long: `authn-webhook runs on a spoke cluster next to its kube-apiserver. The API
server sends it every bearer token its own authenticators do not accept, as a
TokenReview (authentication.k8s.io v1 or v1beta1); the webhook accepts the hub
controller's projected service-account tokens by checking them against the
hub's keys, which it fetches through a discovery URL (crucible's read-only
mirror of the hub's /.well-known/openid-configuration and JWKS).

The hub's service-account issuer is usually https://kubernetes.default.svc,
the same string as the spoke's own: keys, not the issuer, tell the tokens
apart. A token is routed to the provider whose issuer.url equals its iss
claim, checked with kube-apiserver's own JWT authenticator (signature,
audiences, expiry, claimValidationRules, claimMappings, userValidationRules),
then its sub must be in allowedSubjects and the mapped username and groups
must not start with "system:".

Answers: a definitive "no" is authenticated:false (kube-apiserver caches it);
when a provider's keys cannot be fetched the answer carries status.error,
which kube-apiserver never caches. The config file is re-read when it
changes (checked every --reload-interval) and on SIGHUP; a broken file is
logged and the previous configuration keeps serving.

kube-apiserver authenticates to the webhook with a client certificate:
--client-ca names the CA bundle that signs it (re-read when it changes) and
the TLS handshake refuses any client without such a certificate, so nothing
else can submit tokens to be checked (an oracle for which tokens are valid,
and load on the hub's keys) or read the answers. --client-name narrows it to
certificates whose CN or a DNS SAN is listed, useful when that CA signs other
clients too. Without --client-ca the webhook refuses to start unless
--insecure-no-client-auth says that anyone who can reach --listen may ask
(only for tests, or a listener no one else can reach).

Endpoints on --listen (TLS): POST / and POST /authenticate (TokenReview),
GET /healthz, GET /readyz (200 once every provider has keys; JSON per
provider). On --metrics-listen (plain HTTP, no tokens ever pass it):
GET /metrics (Prometheus, crucible_webhook_*), and /healthz and /readyz again
for probes that have no client certificate; with --pprof also Go's profiler
under /debug/pprof/ (off by default). That listener answers only a Host that
is an IP literal (probes and scrapers address the pod by IP) or one of
--metrics-allowed-hosts, 421 otherwise: a web page that rebinds its own name
to 127.0.0.1 cannot read it from a browser. Refused reviews are logged one
per line at debug level only, and summed up at most once a minute at info.

Point the spoke's kube-apiserver at it with
  --authentication-token-webhook-config-file=/etc/crucible/webhook.kubeconfig
  --authentication-token-webhook-version=v1
where webhook.kubeconfig (crucible render spoke --authn webhook-kubeconfig) is:

  apiVersion: v1
  kind: Config
  clusters:
  - name: crucible-authn-webhook
    cluster:
      server: https://127.0.0.1:9443/authenticate
      certificate-authority: /etc/crucible/webhook-ca.crt
  users:
  - name: kube-apiserver
    user:
      client-certificate: /etc/crucible/webhook-client.crt
      client-key: /etc/crucible/webhook-client.key
  contexts:
  - name: webhook
    context: {cluster: crucible-authn-webhook, user: kube-apiserver}
  current-context: webhook

Example --config:

  jwksMinRefreshInterval: 10s   # optional: min time between key fetches per provider
  providers:
  - name: hub                   # DNS label; in logs, metrics and /readyz
    allowedSubjects:            # exact sub claims; empty accepts nobody
    - system:serviceaccount:crucible:crucible-controller
    issuer:                     # as in kube-apiserver's AuthenticationConfiguration
      url: https://kubernetes.default.svc
      discoveryURL: https://mirror.example:8443/.well-known/openid-configuration
      certificateAuthority: |   # optional: verifies discoveryURL and jwks_uri
        -----BEGIN CERTIFICATE-----
        ...
      audiences: [wharf]
    claimMappings:
      username: {claim: sub, prefix: "hub:"}
    maxKeyAge: 24h              # optional: how long keys persisted in --state-dir may be used

The discovery document's issuer must equal issuer.url exactly; keys come from
its jwks_uri (https only).

With --state-dir, every good fetch is written there (provider-<name>.json:
the documents as fetched, the fetch time, the provider's name, issuer and
discovery URL). A webhook that starts while discovery fails verifies with
that file if it names the same provider, issuer and discovery URL and is
younger than the provider's maxKeyAge (default 24h; 0s turns persistence
off for the provider); fresh keys replace it as soon as a fetch succeeds.
Meanwhile a hub key removed from the mirror stays trusted; to revoke at
once, delete the file and restart. --state-configmap keeps the same in a
ConfigMap that must exist (the spoke chart creates it), one key per
provider; the webhook only gets and updates it, re-reading on a conflict
between replicas, and a missing or unreadable ConfigMap means starting
without persisted keys (logged). To revoke, delete the provider's key and
restart the pods. /readyz shows each provider's keySource
(fetched or persisted) and keyAgeSeconds. Fields are those of an AuthenticationConfiguration
jwt entry (apiserver.config.k8s.io/v1) except egressSelectorType; unknown
fields are errors.`,
		Example: `  crucible authn-webhook --config webhook.yaml --tls-cert tls.crt --tls-key tls.key \
    --client-ca apiserver-client-ca.crt --client-name kube-apiserver-webhook-client
  crucible authn-webhook --config webhook.yaml --listen 127.0.0.1:9443 --insecure-http --insecure-no-client-auth`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if configFile == "" {
				return errors.New("--config is required")
			}
			if err := webhookListenerErrors(serve, ops, opsHosts, noClientAuth); err != nil {
				return err
			}
			ctx := cmd.Context()
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			cfg, err := webhook.LoadConfig(configFile)
			if err != nil {
				return err
			}
			state, err := webhookState(stateDir, stateConfigMap, kubeconfig)
			if err != nil {
				return err
			}
			srv, err := webhook.NewServer(ctx, cfg, webhook.Options{Logger: log, State: state})
			if err != nil {
				return err
			}
			reloader := &webhook.Reloader{Path: configFile, Interval: reloadInterval, Server: srv, Logger: log}
			g, ctx := errgroup.WithContext(ctx)
			g.Go(func() error { return reloader.Start(ctx) })
			g.Go(func() error { return httpserve.ListenAndServe(ctx, serve, srv.Handler(), log) })
			if ops.Addr != "" {
				g.Go(func() error {
					return httpserve.ListenAndServe(ctx, ops, opsHandler(srv.MetricsHandler(), withPprof, opsHosts), log)
				})
			}
			if err := g.Wait(); err != nil {
				return fmt.Errorf("authn-webhook: %w", err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&configFile, "config", "", "the webhook's configuration file (YAML; see above)")
	f.StringVar(&stateDir, "state-dir", "", "directory where each provider's last fetched discovery document and JWKS are kept (one 0600 file per provider), "+
		"so that after a restart during which discovery fails the webhook verifies with them while younger than the provider's maxKeyAge; \"\" keeps nothing")
	f.StringVar(&stateConfigMap, "state-configmap", "", "NAMESPACE/NAME of an existing ConfigMap that keeps the same, one key per provider, for webhook pods that move between nodes; "+
		"the webhook only gets and updates it (in-cluster credentials, or --kubeconfig); excludes --state-dir")
	f.StringVar(&kubeconfig, "kubeconfig", "", "with --state-configmap: the kubeconfig of the API server holding it (default: $KUBECONFIG, else the pod's in-cluster service account)")
	f.StringVar(&serve.Addr, "listen", "127.0.0.1:9443", "host:port to serve on")
	f.StringVar(&serve.CertFile, "tls-cert", "", "serving certificate (PEM, chain first); re-read when it changes")
	f.StringVar(&serve.KeyFile, "tls-key", "", "serving key (PEM); re-read when it changes")
	f.BoolVar(&serve.InsecureHTTP, "insecure-http", false, "serve plain HTTP instead of TLS; only on a loopback --listen address, for testing")
	f.StringVar(&serve.ClientCAFile, "client-ca", "", "CA bundle (PEM) of kube-apiserver's client certificate; clients without one from it are refused in the TLS handshake; re-read when it changes")
	f.StringSliceVar(&serve.ClientNames, "client-name", nil, "with --client-ca: accept only client certificates whose CN or a DNS SAN is one of these (repeatable)")
	f.BoolVar(&noClientAuth, "insecure-no-client-auth", false, "serve without --client-ca: anyone who reaches --listen can submit TokenReviews; only for tests or an unreachable listener")
	f.StringVar(&ops.Addr, "metrics-listen", "127.0.0.1:9090", `host:port for /metrics, /healthz and /readyz over plain HTTP; "" disables it`)
	f.StringSliceVar(&opsHosts, "metrics-allowed-hosts", []string{"localhost"}, "Host names (any port) --metrics-listen answers besides IP literals; any other Host gets 421 (DNS rebinding)")
	f.BoolVar(&withPprof, "pprof", false, "also serve Go's profiler (/debug/pprof/) on --metrics-listen, to see where review time goes; off by default")
	f.DurationVar(&reloadInterval, "reload-interval", webhook.DefaultReloadInterval, "how often to check --config for changes")
	return cmd
}

// opsHandler is the operations listener's handler, with Go's profiler under
// /debug/pprof/ when withPprof is set, answering only a Host that is an IP
// literal or one of hosts. The profiler stays off the TLS listener that
// receives tokens, and off by default: a heap profile holds memory contents.
func opsHandler(metrics http.Handler, withPprof bool, hosts []string) http.Handler {
	h := metrics
	if withPprof {
		mux := http.NewServeMux()
		mux.Handle("/", metrics)
		httpserve.HandlePprof(mux)
		h = mux
	}
	return httpserve.RequireHost(hosts, "--metrics-allowed-hosts", h)
}

// webhookListenerErrors checks the listener flags before anything starts,
// reporting every problem at once.
func webhookListenerErrors(serve, ops httpserve.Options, opsHosts []string, noClientAuth bool) error {
	var errs []error
	if err := serve.Validate(); err != nil {
		errs = append(errs, err)
	}
	switch {
	case serve.ClientCAFile == "" && !noClientAuth:
		errs = append(errs, errors.New("--client-ca is required: kube-apiserver must authenticate to the webhook "+
			"(pass --insecure-no-client-auth to let anyone who reaches --listen submit tokens)"))
	case serve.ClientCAFile != "" && noClientAuth:
		errs = append(errs, errors.New("--client-ca and --insecure-no-client-auth exclude each other"))
	}
	if ops.Addr != "" {
		if err := ops.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("--metrics-listen: %w", err))
		}
		if ops.Addr == serve.Addr {
			errs = append(errs, errors.New("--metrics-listen must differ from --listen"))
		}
		for _, h := range opsHosts {
			if h == "" || strings.ContainsAny(h, " /@[]:") {
				errs = append(errs, fmt.Errorf("--metrics-allowed-hosts %q: must be a host name without a port (IP literals are always answered)", h))
			}
		}
	}
	return errors.Join(errs...)
}

// webhookState is the store --state-dir or --state-configmap names, or nil
// for neither.
func webhookState(dir, configMap, kubeconfig string) (webhook.StateStore, error) {
	switch {
	case dir != "" && configMap != "":
		return nil, errors.New("--state-dir and --state-configmap exclude each other: keep the keys in one place")
	case kubeconfig != "" && configMap == "":
		return nil, errors.New("--kubeconfig is only used with --state-configmap")
	case dir != "":
		return webhook.StateDir(dir), nil
	case configMap == "":
		return nil, nil
	}
	ns, name, ok := strings.Cut(configMap, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return nil, fmt.Errorf("--state-configmap %q: want NAMESPACE/NAME", configMap)
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("--state-configmap: the API server's client: %w", err)
	}
	cfg.UserAgent = "crucible-authn-webhook"
	client, err := corev1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("--state-configmap: %w", err)
	}
	store, err := webhook.StateConfigMap(client, ns, name)
	if err != nil {
		return nil, fmt.Errorf("--state-configmap: %w", err)
	}
	return store, nil
}

package cli

import (
	"github.com/spf13/cobra"

	"fmt"
	"net/http"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// apiCredentials are how the CLI proves who it is to the controller's API
// (api.auth "kubernetes"): --token, else the user of --kubeconfig's
// ($KUBECONFIG's) current context, else nothing (auth "none" on loopback).
// Every command that talks to the API registers the flags (addServerFlag);
// one command runs per process, so one set of values is enough.
type apiCredentials struct {
	kubeconfig string
	token      string
	// overPlainHTTP is the user's word that plain http to a host that is not
	// loopback may carry them (a network they trust).
	overPlainHTTP bool
}

var credentials apiCredentials

func addCredentialFlags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&credentials.kubeconfig, "kubeconfig", "", "kubeconfig of the hub whose current context's user calls the API (default $KUBECONFIG; token, token-file and exec users)")
	cmd.Flags().StringVar(&credentials.token, "token", "", "hub bearer token for the API (instead of a kubeconfig)")
	cmd.Flags().BoolVar(&credentials.overPlainHTTP, insecureHTTPFlag, false, "send the credentials over plain http to a host that is not loopback (by default only https or a loopback host gets them)")
}

// transport wraps base with the credentials. A kubeconfig is used only for
// its user: client-go's wrappers add the bearer token (static, token file
// re-read as it rotates, or an exec plugin's ExecCredential); the
// controller's address and TLS come from --server, not from the kubeconfig.
// sends reports whether the wrapped transport adds a secret to requests, so
// the caller can refuse a server that must not see one.
func (c apiCredentials) transport(base http.RoundTripper) (rt http.RoundTripper, sends bool, err error) {
	if c.token != "" {
		rt, err := rest.HTTPWrappersForConfig(&rest.Config{BearerToken: c.token}, base)
		return rt, true, err
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if c.kubeconfig != "" {
		rules.ExplicitPath = c.kubeconfig
	} else if os.Getenv(clientcmd.RecommendedConfigPathEnvVar) == "" {
		return base, false, nil // no credentials: the API's auth is "none"
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, false, fmt.Errorf("kubeconfig %s: %w", describeKubeconfig(c.kubeconfig), err)
	}
	user := &rest.Config{
		BearerToken: cfg.BearerToken, BearerTokenFile: cfg.BearerTokenFile, ExecProvider: cfg.ExecProvider,
		AuthProvider: cfg.AuthProvider, Username: cfg.Username, Password: cfg.Password,
	}
	rt, err = rest.HTTPWrappersForConfig(user, base)
	if err != nil {
		return nil, false, fmt.Errorf("kubeconfig %s: credentials: %w", describeKubeconfig(c.kubeconfig), err)
	}
	sends = user.BearerToken != "" || user.BearerTokenFile != "" || user.ExecProvider != nil ||
		user.AuthProvider != nil || user.Username != "" || user.Password != ""
	return rt, sends, nil
}

func describeKubeconfig(explicit string) string {
	if explicit != "" {
		return explicit
	}
	return filepath.Clean(os.Getenv(clientcmd.RecommendedConfigPathEnvVar))
}

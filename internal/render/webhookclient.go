package render

import (
	"errors"
	"fmt"
	"net/url"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// WebhookClient is how a spoke's kube-apiserver reaches crucible's authn
// webhook: the kubeconfig named by --authentication-token-webhook-config-file.
// Every field is a path or URL; key material is never inlined, so the file
// can sit in a ConfigMap while the key stays in a Secret volume.
type WebhookClient struct {
	// URL is the webhook's TokenReview endpoint, https only: kube-apiserver
	// sends it every bearer token it cannot validate itself.
	URL string
	// CAFile verifies the webhook's serving certificate.
	CAFile string
	// ClientCertFile and ClientKeyFile are kube-apiserver's client
	// certificate for the webhook, which refuses connections without one
	// from its --client-ca.
	ClientCertFile, ClientKeyFile string
}

// validate reports every problem at once, each with its field.
func (c WebhookClient) validate() error {
	var errs []error
	if u, err := url.Parse(c.URL); err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil {
		errs = append(errs, fmt.Errorf("webhook URL %q: want https://host[:port]/path without credentials", c.URL))
	}
	for _, f := range []struct{ name, value string }{
		{"CA file", c.CAFile}, {"client certificate file", c.ClientCertFile}, {"client key file", c.ClientKeyFile},
	} {
		if f.value == "" {
			errs = append(errs, fmt.Errorf("webhook %s: required", f.name))
		}
	}
	return errors.Join(errs...)
}

// WebhookKubeconfig renders the kubeconfig kube-apiserver reads with
// --authentication-token-webhook-config-file (and
// --authentication-token-webhook-version=v1): the webhook as the cluster,
// kube-apiserver's client certificate as the user.
func WebhookKubeconfig(c WebhookClient) ([]byte, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["crucible-authn-webhook"] = &clientcmdapi.Cluster{Server: c.URL, CertificateAuthority: c.CAFile}
	cfg.AuthInfos["kube-apiserver"] = &clientcmdapi.AuthInfo{ClientCertificate: c.ClientCertFile, ClientKey: c.ClientKeyFile}
	cfg.Contexts["webhook"] = &clientcmdapi.Context{Cluster: "crucible-authn-webhook", AuthInfo: "kube-apiserver"}
	cfg.CurrentContext = "webhook"
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("encode webhook kubeconfig: %w", err)
	}
	return data, nil
}

package devstack

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// writeKubeconfig writes a kubeconfig for server with a client certificate
// identity, embedding the data so the file stands alone.
func writeKubeconfig(path, name, server string, caPEM []byte, id KeyPair) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificateData: id.CertPEM, ClientKeyData: id.KeyPEM}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	cfg.CurrentContext = name
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}

// adminConfig is a REST config for server as system:masters. Rate limits are
// off: tests create objects in bursts and the API server is local.
func adminConfig(server string, caPEM []byte, id KeyPair) *rest.Config {
	return &rest.Config{
		Host: server,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   caPEM,
			CertData: id.CertPEM,
			KeyData:  id.KeyPEM,
		},
		QPS:   -1,
		Burst: -1,
	}
}

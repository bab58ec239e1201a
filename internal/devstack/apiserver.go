package devstack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// pki is what every component of the stack shares: one serving certificate for
// 127.0.0.1 and localhost, the admin identity, and the API servers' identity
// towards kwok (the kubelet API).
type pki struct {
	serving, admin, kubeletClient KeyPair
}

func (s *Stack) issuePKI() (pki, error) {
	dir := filepath.Join(s.Dir, "pki")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return pki{}, err
	}
	var p pki
	var err error
	if p.serving, err = s.ca.issue(dir, "serving", certSpec{CommonName: "localhost", Server: true}); err != nil {
		return pki{}, err
	}
	if p.admin, err = s.ca.issue(dir, "admin", certSpec{CommonName: "devstack-admin", Organization: []string{"system:masters"}, Client: true}); err != nil {
		return pki{}, err
	}
	if p.kubeletClient, err = s.ca.issue(dir, "kubelet-client", certSpec{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}, Client: true}); err != nil {
		return pki{}, err
	}
	return p, nil
}

// startAPIServers starts the hub's and every spoke's kube-apiserver at once and
// waits until each answers /readyz.
func (s *Stack) startAPIServers(ctx context.Context) error {
	certs, err := s.issuePKI()
	if err != nil {
		return err
	}
	s.Hub = &Cluster{Name: hubName}
	for _, so := range s.opts.Spokes {
		s.Spokes = append(s.Spokes, &Cluster{Name: so.Name, Nodes: so.Nodes, NodeName: so.Nodes[0].Name, RunLive: s.PodNetwork && !so.NoRunLive,
			LoopNamespace: s.loopNamespace(so.Name)})
	}
	all := append([]*Cluster{s.Hub}, s.Spokes...)
	for i, c := range all {
		if err := s.prepareCluster(c, certs); err != nil {
			return err
		}
		var so SpokeOptions
		if i > 0 {
			so = s.opts.Spokes[i-1]
		}
		args, err := s.apiserverArgs(c, certs, so)
		if err != nil {
			return err
		}
		if _, err := s.start("kube-apiserver-"+c.Name, s.opts.Tools.KubeAPIServer(), args); err != nil {
			return err
		}
	}
	if err := each(all, func(c *Cluster) error {
		p := s.proc("kube-apiserver-" + c.Name)
		began := time.Now()
		err := p.waitReady(ctx, startTimeout, c.Ready)
		if err != nil {
			return err
		}
		s.opts.Progress("%s kube-apiserver ready at %s (%s)", c.Name, c.Server, time.Since(began).Round(100*time.Millisecond))
		return nil
	}); err != nil {
		return err
	}
	s.addGuests()
	return nil
}

func (s *Stack) prepareCluster(c *Cluster, certs pki) error {
	c.dir = filepath.Join(s.Dir, c.Name)
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return err
	}
	port, err := s.freePort()
	if err != nil {
		return err
	}
	c.Server = "https://127.0.0.1:" + strconv.Itoa(port)
	if c.ServiceAccountKey, err = newServiceAccountKey(c.dir, "service-account"); err != nil {
		return err
	}
	c.KubeconfigFile = filepath.Join(s.Dir, c.Name+".kubeconfig")
	if err := writeKubeconfig(c.KubeconfigFile, c.Name, c.Server, s.ca.CertPEM, certs.admin); err != nil {
		return err
	}
	c.Admin = adminConfig(c.Server, s.ca.CertPEM, certs.admin)
	if c.Client, err = kubernetes.NewForConfig(c.Admin); err != nil {
		return fmt.Errorf("client for %s: %w", c.Name, err)
	}
	return nil
}

func (s *Stack) apiserverArgs(c *Cluster, certs pki, so SpokeOptions) ([]string, error) {
	port := c.Server[len("https://127.0.0.1:"):]
	issuer := Issuer
	if so.Issuer != "" {
		issuer = so.Issuer
	}
	args := []string{
		"--etcd-servers=" + s.EtcdURL,
		"--etcd-prefix=/" + c.Name,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + port,
		"--endpoint-reconciler-type=none",
		"--cert-dir=" + filepath.Join(c.dir, "apiserver-certs"),
		"--tls-cert-file=" + certs.serving.CertFile,
		"--tls-private-key-file=" + certs.serving.KeyFile,
		"--client-ca-file=" + s.CAFile,
		"--authorization-mode=RBAC",
		"--service-cluster-ip-range=10.96.0.0/16",
		"--service-account-issuer=" + issuer,
		"--service-account-key-file=" + c.ServiceAccountKey.PublicFile,
		"--service-account-signing-key-file=" + c.ServiceAccountKey.PrivateFile,
		"--api-audiences=" + Issuer,
		"--kubelet-client-certificate=" + certs.kubeletClient.CertFile,
		"--kubelet-client-key=" + certs.kubeletClient.KeyFile,
		"--kubelet-certificate-authority=" + s.CAFile,
		"--kubelet-preferred-address-types=InternalIP",
		"--profiling=" + strconv.FormatBool(s.opts.APIServerProfiling),
		"--v=1",
	}
	if so.BuiltinHubAuthn {
		path := filepath.Join(c.dir, "authentication-config.yaml")
		if err := os.WriteFile(path, []byte(s.builtinAuthenticationConfig(c.Name)), 0o644); err != nil {
			return nil, err
		}
		args = append(args, "--authentication-config="+path)
	}
	if webhook := so.TokenWebhook; webhook != nil {
		path := filepath.Join(c.dir, "token-webhook.kubeconfig")
		if err := writeWebhookKubeconfig(path, webhook, s.CAFile); err != nil {
			return nil, err
		}
		ttl := webhook.CacheTTL
		if ttl == 0 {
			ttl = 10 * time.Second
		}
		args = append(args,
			"--authentication-token-webhook-config-file="+path,
			"--authentication-token-webhook-version=v1",
			"--authentication-token-webhook-cache-ttl="+ttl.String(),
		)
	}
	return append(args, s.opts.ExtraAPIServerArgs...), nil
}

// writeWebhookKubeconfig writes the file --authentication-token-webhook-config-file
// reads: a kubeconfig whose cluster is the webhook.
func writeWebhookKubeconfig(path string, w *TokenWebhook, stackCA string) error {
	cfg := clientcmdapi.NewConfig()
	cluster := &clientcmdapi.Cluster{Server: w.URL}
	if strings.HasPrefix(w.URL, "https://") {
		cluster.CertificateAuthority = w.CAFile
		if cluster.CertificateAuthority == "" {
			cluster.CertificateAuthority = stackCA
		}
	}
	cfg.Clusters["webhook"] = cluster
	cfg.AuthInfos["apiserver"] = &clientcmdapi.AuthInfo{ClientCertificate: w.ClientCertFile, ClientKey: w.ClientKeyFile}
	cfg.Contexts["webhook"] = &clientcmdapi.Context{Cluster: "webhook", AuthInfo: "apiserver"}
	cfg.CurrentContext = "webhook"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write token webhook config %s: %w", path, err)
	}
	return nil
}

// Ready reports whether c's kube-apiserver answers /readyz.
func (c *Cluster) Ready(ctx context.Context) error {
	_, err := c.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	return err
}

func (s *Stack) proc(name string) *process {
	for _, p := range s.procs {
		if p.Name == name {
			return p
		}
	}
	return nil
}

package devstack

import (
	"context"
	"crypto/tls"
	"embed"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

//go:embed kwokstages/*.yaml
var kwokStages embed.FS

// startNodes gives every spoke what turns pod objects into running pods:
// kube-scheduler (binding), kube-controller-manager (garbage collection,
// default service accounts, node taints), kwok (the nodes: their status and
// leases) and the dev runtime (the nodes' kubelet: it runs their pods and
// createNodes makes c's nodes. kwok manages only nodes carrying its
// annotation; they are created here so that their names, capacity, labels
// and taints are ours.
func createNodes(ctx context.Context, c *Cluster) error {
	for _, n := range c.Nodes {
		if _, err := c.Client.CoreV1().Nodes().Create(ctx, n.object(), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create node %s on %s: %w", n.Name, c.Name, err)
		}
	}
	return nil
}

// serves pods/log on the one kubelet port all of the spoke's nodes name).
func (s *Stack) startNodes(ctx context.Context) error {
	kubeletPorts, err := s.freePorts(len(s.servers()))
	if err != nil {
		return err
	}
	// The runtime binds the kubelet ports first: a port found free is free
	// only until something else takes it (an outgoing connection's
	// ephemeral port, another stack), and the agents take seconds to start.
	if err := s.startRuntime(ctx, kubeletPorts); err != nil {
		return err
	}
	for i, c := range s.servers() {
		if err := s.startSpokeAgents(ctx, c, kubeletPorts[i]); err != nil {
			return err
		}
	}
	return each(s.servers(), func(c *Cluster) error { return s.waitSpokeReady(ctx, c) })
}

func (s *Stack) startSpokeAgents(ctx context.Context, c *Cluster, kubeletPort int) error {
	certs := filepath.Join(s.Dir, "pki")
	ports, err := s.freePorts(3)
	if err != nil {
		return err
	}
	kwokPort, schedPort, kcmPort := ports[0], ports[1], ports[2]

	kwokConfig := filepath.Join(c.dir, "kwok.yaml")
	if err := writeKwokConfig(kwokConfig); err != nil {
		return err
	}
	if err := createNodes(ctx, c); err != nil {
		return err
	}

	kubeconfig := c.KubeconfigFile
	agents := []struct {
		name, path string
		args       []string
		port       int
	}{
		{"kwok-" + c.Name, s.opts.Tools.Kwok(), []string{
			"--kubeconfig=" + kubeconfig,
			"--config=" + kwokConfig,
			"--manage-all-nodes=false",
			"--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
			"--node-ip=127.0.0.1",
			// Every node's kubelet port, in its status, is the dev runtime's
			// one port for the spoke.
			"--node-port=" + strconv.Itoa(kubeletPort),
			"--server-address=127.0.0.1:" + strconv.Itoa(kwokPort),
			"--tls-cert-file=" + filepath.Join(certs, "serving.crt"),
			"--tls-private-key-file=" + filepath.Join(certs, "serving.key"),
			"--node-lease-duration-seconds=40",
		}, 0},
		{"kube-scheduler-" + c.Name, s.opts.Tools.KubeScheduler(), []string{
			"--kubeconfig=" + kubeconfig,
			"--authentication-kubeconfig=" + kubeconfig,
			"--authorization-kubeconfig=" + kubeconfig,
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(schedPort),
			"--cert-dir=" + filepath.Join(c.dir, "scheduler-certs"),
			"--leader-elect=false",
		}, schedPort},
		{"kube-controller-manager-" + c.Name, s.opts.Tools.KubeControllerManager(), []string{
			"--kubeconfig=" + kubeconfig,
			"--authentication-kubeconfig=" + kubeconfig,
			"--authorization-kubeconfig=" + kubeconfig,
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(kcmPort),
			"--cert-dir=" + filepath.Join(c.dir, "kcm-certs"),
			"--leader-elect=false",
			spokeControllersFlag(),
			"--use-service-account-credentials=false",
			"--service-account-private-key-file=" + c.ServiceAccountKey.PrivateFile,
			"--root-ca-file=" + s.CAFile,
		}, kcmPort},
	}
	for _, a := range agents {
		p, err := s.start(a.name, a.path, a.args)
		if err != nil {
			return err
		}
		if a.port == 0 {
			// kwok serves nothing worth probing; what it does shows in its
			// nodes (waitSpokeReady), and a restart waits for that.
			p.ready = func(ctx context.Context) error { return nodesSchedulable(ctx, c) }
			continue
		}
		url := fmt.Sprintf("https://127.0.0.1:%d/healthz", a.port)
		p.ready = func(ctx context.Context) error { return get(ctx, selfSignedClient, url) }
		if err := p.waitReady(ctx, startTimeout, p.ready); err != nil {
			return err
		}
	}
	return nil
}

// nodesSchedulable reports the first of spoke c's nodes that is not Ready
// or still carries the not-ready taint.
func nodesSchedulable(ctx context.Context, c *Cluster) error {
	for _, n := range c.Nodes {
		if err := nodeSchedulable(ctx, c, n.Name); err != nil {
			return err
		}
	}
	return nil
}

// selfSignedClient probes the /healthz of kube-scheduler and
// kube-controller-manager, which serve self-signed certificates on loopback.
var selfSignedClient = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // loopback health probe of a process we started

// waitSpokeReady waits until every node of the spoke is Ready without the
// not-ready taint (kube-controller-manager removes it) and the
// service-account controller has created the default account, so a test's
// first pod schedules.
func (s *Stack) waitSpokeReady(ctx context.Context, c *Cluster) error {
	began := time.Now()
	kwok := s.proc("kwok-" + c.Name)
	err := kwok.waitReady(ctx, startTimeout, func(ctx context.Context) error {
		if err := nodesSchedulable(ctx, c); err != nil {
			return err
		}
		if _, err := c.Client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{}); err != nil {
			return fmt.Errorf("default service account: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("spoke %s: %w", c.Name, err)
	}
	s.opts.Progress("%s nodes %s Ready (%s)", c.Name, strings.Join(nodeNames(c.Nodes), ", "), time.Since(began).Round(100*time.Millisecond))
	return nil
}

// nodeSchedulable reports why node name of c cannot take pods yet, or nil.
func nodeSchedulable(ctx context.Context, c *Cluster, name string) error {
	node, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if !nodeReady(node) {
		return fmt.Errorf("node %s not Ready yet", name)
	}
	for _, t := range node.Spec.Taints {
		if t.Key == corev1.TaintNodeNotReady {
			return fmt.Errorf("node %s still tainted %s", name, t.Key)
		}
	}
	return nil
}

func nodeNames(nodes []NodeSpec) []string {
	names := make([]string, len(nodes))
	for i, n := range nodes {
		names[i] = n.Name
	}
	return names
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// writeKwokConfig writes kwok's node stages. It has no pod stages, so kwok
// leaves pods alone: the dev runtime writes their status.
func writeKwokConfig(path string) error {
	entries, err := kwokStages.ReadDir("kwokstages")
	if err != nil {
		return err
	}
	var docs []string
	for _, e := range entries {
		data, err := kwokStages.ReadFile("kwokstages/" + e.Name())
		if err != nil {
			return err
		}
		docs = append(docs, strings.TrimSpace(string(data)))
	}
	return os.WriteFile(path, []byte(strings.Join(docs, "\n---\n")+"\n"), 0o644)
}

package devstack

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/render"
)

// Federation is the crucible side of a stack: the controller on the hub
// (serving the discovery mirror) and one authn webhook per spoke, each spoke's
// kube-apiserver pointed at its webhook. It runs only when Options.Crucible
// names a crucible binary.
type Federation struct {
	// ControllerInternalURL serves health, readiness and metrics (the API).
	ControllerInternalURL string
	// ControllerExternalURL is the external route: the mirror (and drop-box).
	ControllerExternalURL string
	// ControllerMetricsURL serves the controller's /metrics.
	ControllerMetricsURL string
	// ControllerTokenFile is the controller's hub token (audience: the hub),
	// as a kubelet would project it.
	ControllerTokenFile string
	// WebhookURLs maps spoke name to its webhook's base URL. Its listener
	// requires the client certificate of WebhookClientCerts.
	WebhookURLs map[string]string
	// WebhookMetricsURLs maps spoke name to its webhook's plain-HTTP
	// operations listener: /metrics, /healthz, /readyz.
	WebhookMetricsURLs map[string]string
	// WebhookClientCerts maps spoke name to the client certificate its
	// kube-apiserver presents to its webhook, the only one the webhook
	// accepts (the stack's CA signs it, and the webhook also requires its
	// common name, WebhookClientName).
	WebhookClientCerts map[string]KeyPair
	// WebhookConfigFiles maps spoke name to its webhook's configuration file,
	// which the webhook reloads when it changes.
	WebhookConfigFiles map[string]string
	// WebhookStateDirs maps spoke name to its webhook's --state-dir, where
	// it keeps the hub's keys it last fetched for its next start.
	WebhookStateDirs map[string]string
	// ProfileFile is the controller's crucible.toml.
	ProfileFile string
	// SpokeTokenFiles maps spoke name to the controller's token for it
	// (audience = the spoke's name).
	SpokeTokenFiles map[string]string

	internalPort, externalPort int
	metricsPort                int
	webhookPorts               map[string]int
	webhookMetricsPorts        map[string]int
}

// Identity and wiring of the federation, as ADR-0048 sets it up.
const (
	// HubSubject is the controller's identity, the one subject the spokes'
	// webhooks accept from the hub.
	HubSubject = "system:serviceaccount:" + HubNamespace + ":" + HubServiceAccount
	// HubUsernamePrefix marks hub identities on a spoke.
	HubUsernamePrefix = "hub:"
	// Instance is the controller's origin-label value in the stack.
	Instance = "devstack"
	// IngestAudience is the audience of work pods' drop-box tokens.
	IngestAudience = "crucible-ingest"
)

// planFederation picks the ports of the controller and the webhooks before any
// API server starts, because a spoke's kube-apiserver needs its webhook's URL
// in its flags.
func (s *Stack) planFederation() error {
	if s.opts.Crucible == "" {
		return nil
	}
	n := len(s.opts.Spokes)
	ports, err := s.freePorts(2 + 2*n)
	if err != nil {
		return err
	}
	pki := filepath.Join(s.Dir, "pki")
	if err := os.MkdirAll(pki, 0o700); err != nil {
		return err
	}
	f := &Federation{
		internalPort: ports[0], externalPort: ports[1],
		ControllerInternalURL: "http://127.0.0.1:" + strconv.Itoa(ports[0]),
		ControllerExternalURL: "https://" + s.podHost() + ":" + strconv.Itoa(ports[1]),
		WebhookURLs:           map[string]string{},
		WebhookMetricsURLs:    map[string]string{},
		WebhookClientCerts:    map[string]KeyPair{},
		WebhookConfigFiles:    map[string]string{},
		WebhookStateDirs:      map[string]string{},
		webhookPorts:          map[string]int{},
		webhookMetricsPorts:   map[string]int{},
	}
	metrics, err := s.freePorts(1)
	if err != nil {
		return err
	}
	f.metricsPort, f.ControllerMetricsURL = metrics[0], "http://127.0.0.1:"+strconv.Itoa(metrics[0])
	for i := range s.opts.Spokes {
		so := &s.opts.Spokes[i]
		f.webhookPorts[so.Name], f.webhookMetricsPorts[so.Name] = ports[2+i], ports[2+n+i]
		f.WebhookURLs[so.Name] = "https://127.0.0.1:" + strconv.Itoa(ports[2+i])
		f.WebhookMetricsURLs[so.Name] = "http://127.0.0.1:" + strconv.Itoa(ports[2+n+i])
		kp, err := s.ca.issue(pki, "webhook-client-"+so.Name, certSpec{CommonName: WebhookClientName(so.Name), Client: true})
		if err != nil {
			return err
		}
		f.WebhookClientCerts[so.Name] = kp
		if so.TokenWebhook == nil && !so.BuiltinHubAuthn {
			so.TokenWebhook = &TokenWebhook{URL: f.WebhookURLs[so.Name] + "/authenticate", ClientCertFile: kp.CertFile, ClientKeyFile: kp.KeyFile}
		}
	}
	s.Federation = f
	return nil
}

// WebhookClientName is the common name of the client certificate a spoke's
// kube-apiserver presents to its authn webhook. The stack's one CA signs
// every certificate (the admin's too), so the webhook accepts only this name.
func WebhookClientName(spoke string) string {
	return "kube-apiserver-" + spoke + "-webhook-client"
}

// startFederation starts the controller, then every spoke's webhook, and waits
// until each is ready: the controller's mirror has fetched the hub's documents
// and each webhook has the hub's keys through it. The controller holds no
// spoke credential but its hub tokens, and on each spoke exactly the RBAC of
// `crucible render spoke`.
func (s *Stack) startFederation(ctx context.Context) error {
	f := s.Federation
	if f == nil {
		return nil
	}
	dir := filepath.Join(s.Dir, "crucible")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := s.startKubelet(ctx, dir); err != nil {
		return err
	}
	if err := s.grantLease(ctx); err != nil {
		return err
	}
	if err := s.grantTokenRequest(ctx); err != nil {
		return err
	}
	if err := s.serveClusterProfiles(ctx); err != nil {
		return err
	}
	profile := filepath.Join(dir, "crucible.toml")
	main := replicaPorts{internal: f.internalPort, external: f.externalPort, metrics: f.metricsPort, externalURL: f.ControllerExternalURL}
	if err := os.WriteFile(profile, []byte(s.profile(dir, main, s.listed())), 0o644); err != nil {
		return err
	}
	f.ProfileFile = profile
	args := []string{"controller", "--config=" + profile}
	if s.opts.ControllerPprofListen != "" {
		args = append(args, "--pprof-listen="+s.opts.ControllerPprofListen)
	}
	ctl, err := s.start("crucible-controller", s.opts.Crucible, args)
	if err != nil {
		return err
	}
	client := s.httpClient()
	if err := ctl.waitReady(ctx, startTimeout, func(ctx context.Context) error {
		return get(ctx, client, f.ControllerInternalURL+"/readyz")
	}); err != nil {
		return err
	}
	s.opts.Progress("crucible controller ready: internal %s, external %s", f.ControllerInternalURL, f.ControllerExternalURL)

	hooked, err := s.startWebhooks(ctx, dir)
	if err != nil {
		return err
	}
	return each(hooked, func(c *Cluster) error {
		p := s.proc("crucible-webhook-" + c.Name)
		// Ready as kube-apiserver sees it: over TLS, with its certificate.
		apiserver, err := s.httpClientAs(f.WebhookClientCerts[c.Name])
		if err != nil {
			return err
		}
		err = p.waitReady(ctx, startTimeout, func(ctx context.Context) error {
			return get(ctx, apiserver, f.WebhookURLs[c.Name]+"/readyz")
		})
		if err != nil {
			return err
		}
		s.opts.Progress("%s authn webhook ready at %s", c.Name, f.WebhookURLs[c.Name])
		return nil
	})
}

// startWebhooks grants each spoke its RBAC and starts the authn webhook of
// each spoke that has one (not BuiltinHubAuthn); it returns those spokes.
func (s *Stack) startWebhooks(ctx context.Context, dir string) ([]*Cluster, error) {
	f := s.Federation
	serving := filepath.Join(s.Dir, "pki", "serving")
	var hooked []*Cluster
	for _, c := range s.Spokes {
		if err := s.applySpokeRBAC(ctx, c); err != nil {
			return nil, err
		}
		if c.Host != "" { // its provider is in its host's webhook
			f.WebhookConfigFiles[c.Name], f.WebhookStateDirs[c.Name] = f.WebhookConfigFiles[c.Host], f.WebhookStateDirs[c.Host]
			continue
		}
		if s.spokeOptions(c.Name).BuiltinHubAuthn {
			continue
		}
		hooked = append(hooked, c)
		cfg := filepath.Join(dir, "webhook-"+c.Name+".yaml")
		if err := os.WriteFile(cfg, []byte(s.WebhookConfig(c.Name, []string{HubSubject})), 0o644); err != nil {
			return nil, err
		}
		f.WebhookConfigFiles[c.Name] = cfg
		f.WebhookStateDirs[c.Name] = filepath.Join(dir, "webhook-state-"+c.Name)
		if _, err := s.start("crucible-webhook-"+c.Name, s.opts.Crucible, []string{
			"authn-webhook",
			"--config=" + cfg,
			"--listen=127.0.0.1:" + strconv.Itoa(f.webhookPorts[c.Name]),
			"--tls-cert=" + serving + ".crt",
			"--tls-key=" + serving + ".key",
			"--client-ca=" + s.CAFile,
			"--client-name=" + WebhookClientName(c.Name),
			"--metrics-listen=127.0.0.1:" + strconv.Itoa(f.webhookMetricsPorts[c.Name]),
			"--reload-interval=1s",
			"--state-dir=" + f.WebhookStateDirs[c.Name],
		}); err != nil {
			return nil, err
		}
	}
	return hooked, nil
}

// startKubelet writes the controller's first tokens and keeps them fresh: in
// this process, or for a detached stack in a process of its own.
func (s *Stack) startKubelet(ctx context.Context, dir string) error {
	f := s.Federation
	f.ControllerTokenFile = filepath.Join(dir, "controller-hub.token")
	tokens := []projectedToken{{File: f.ControllerTokenFile, Audience: Issuer}}
	f.SpokeTokenFiles = map[string]string{}
	for _, c := range s.Spokes {
		if s.tokenRequest(c) {
			continue // the controller asks the hub itself
		}
		f.SpokeTokenFiles[c.Name] = filepath.Join(dir, "controller-"+c.Name+".token")
		tokens = append(tokens, projectedToken{File: f.SpokeTokenFiles[c.Name], Audience: c.Name})
	}
	s.kubelet = newKubelet(s.Hub.Client, s.Dir, tokens)
	if err := s.kubelet.rotate(ctx, false); err != nil {
		return err
	}
	if s.opts.Detached {
		_, err := s.start("crucible-token-refresher", s.opts.Crucible, []string{"dev", "refresh-tokens", "--dir=" + s.Dir})
		return err
	}
	kctx, cancel := context.WithCancel(context.Background())
	s.stopKubelet = cancel
	go s.kubelet.run(kctx, s.opts.Progress)
	return nil
}

// applySpokeRBAC grants the controller's hub identity exactly R-ID4 on c,
// and the capacity view's read access (render.CapacityRBAC).
func (s *Stack) applySpokeRBAC(ctx context.Context, c *Cluster) error {
	entry := s.ClusterEntry(c)
	for _, obj := range render.SpokeRBAC(entry, HubUsernamePrefix+HubSubject) {
		if err := createObject(ctx, c, obj); err != nil {
			return fmt.Errorf("apply controller RBAC on %s: %w", c.Name, err)
		}
	}
	return nil
}

// ClusterEntry is spoke c as the stack's controller profile names it: its
// server, the stack's CA and the controller's federated token file, with
// capacity (placement's view, and its RBAC) unless its options say NoCapacity, or for
// a TokenRequest spoke token_source = "request" (a client built from that
// entry needs the hub's account, fleet.WithHubAccount).
func (s *Stack) ClusterEntry(c *Cluster) profile.ClusterEntry {
	e := profile.ClusterEntry{
		Name: c.Name, Server: c.Server, CAFile: s.CAFile, TokenSource: profile.TokenSourceFile, TokenFile: s.Federation.SpokeTokenFiles[c.Name],
		LoopNamespace: c.LoopNamespace, TurnServiceAccount: SpokeServiceAccount,
		IngestURL: s.Federation.ControllerExternalURL, IngestAudience: IngestAudience,
		RunLive: c.RunLive, Capacity: !s.noCapacity(c),
	}
	if s.tokenRequest(c) {
		e.TokenSource, e.TokenFile = profile.TokenSourceRequest, ""
	}
	return e
}

// noCapacity reports whether spoke c's options leave capacity off.
func (s *Stack) noCapacity(c *Cluster) bool {
	return s.spokeOptions(c.Name).NoCapacity || c.Host != "" // a guest's view would count its host's nodes again
}

// tokenRequest reports whether spoke c's options ask for TokenRequest.
func (s *Stack) tokenRequest(c *Cluster) bool {
	return s.spokeOptions(c.Name).TokenRequest
}

// grantTokenRequest gives the controller's hub identity what its spokes
// with TokenRequest need, exactly `crucible render hub --token-request`.
func (s *Stack) grantTokenRequest(ctx context.Context) error {
	if !slices.ContainsFunc(s.Spokes, s.tokenRequest) {
		return nil
	}
	for _, obj := range render.HubTokenRequestRBAC(HubNamespace, HubServiceAccount) {
		if err := createObject(ctx, s.Hub, obj); err != nil {
			return fmt.Errorf("grant the controller token requests: %w", err)
		}
	}
	return nil
}

// listed are the spokes the controller's first profile lists: all but the
// Unlisted ones.
func (s *Stack) listed() []*Cluster {
	var out []*Cluster
	for _, c := range s.Spokes {
		if !s.spokeOptions(c.Name).Unlisted {
			out = append(out, c)
		}
	}
	return out
}

// ControllerProfile renders the stack's controller's profile as it was
// written at start, except that its [[clusters]] are the spokes named, in
// that order: what a test writes over Federation.ProfileFile to add, remove
// or reorder spokes of the running controller.
func (s *Stack) ControllerProfile(spokes ...string) (string, error) {
	if s.Federation == nil {
		return "", errors.New("the stack runs no controller")
	}
	return s.ReplicaProfile(s.Controller(), spokes...)
}

// ReplicaProfile is ControllerProfile for replica r (Controller or one
// StartController added), to be written over r.ProfileFile.
func (s *Stack) ReplicaProfile(r Replica, spokes ...string) (string, error) {
	if s.Federation == nil || r.ProfileFile == "" {
		return "", errors.New("the stack runs no such controller")
	}
	cs, err := s.spokesNamed(spokes)
	if err != nil {
		return "", err
	}
	return s.profile(filepath.Dir(r.ProfileFile), r.ports, cs), nil
}

// spokesNamed are the stack's spokes called names, in that order.
func (s *Stack) spokesNamed(names []string) ([]*Cluster, error) {
	cs := make([]*Cluster, 0, len(names))
	for _, name := range names {
		c := s.Spoke(name)
		if c == nil {
			return nil, fmt.Errorf("no spoke %q in the stack", name)
		}
		cs = append(cs, c)
	}
	return cs, nil
}

// profile renders a controller's crucible.toml for this stack: the stack's
// controller, or a replica of it on other ports (same instance, same
// store), listing spokes.
func (s *Stack) profile(dir string, rp replicaPorts, spokes []*Cluster) string {
	f := s.Federation
	serving := filepath.Join(s.Dir, "pki", "serving")
	var b strings.Builder
	fmt.Fprintf(&b, "# crucible profile written by the dev stack\n")
	switch {
	case s.opts.DefaultCluster != "":
		fmt.Fprintf(&b, "default_cluster = %q\n", s.opts.DefaultCluster)
	case len(spokes) > 0:
		fmt.Fprintf(&b, "default_cluster = %q\n", spokes[0].Name)
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "[controller]\ninstance = %q\ninternal_listen = \"127.0.0.1:%d\"\nexternal_listen = \"%s:%d\"\n", Instance, rp.internal, s.podHost(), rp.external)
	fmt.Fprintf(&b, "external_url = %q\nexternal_tls_cert = %q\nexternal_tls_key = %q\n", rp.externalURL, serving+".crt", serving+".key")
	fmt.Fprintf(&b, "metrics_listen = \"127.0.0.1:%d\"\n", rp.metrics)
	store := s.opts.ControllerStore
	if store == "" {
		store = "sqlite:" + filepath.Join(dir, "crucible.db")
	}
	fmt.Fprintf(&b, "store = %q\nartifacts_dir = %q\n", store, filepath.Join(dir, "artifacts"))
	if s.opts.LeaderElect {
		fmt.Fprintf(&b, "leader_elect = true\n\n[leader_election]\nlease_duration = %q\nrenew_deadline = %q\nretry_period = %q\n", s.lease().String(),
			(s.lease() * 2 / 3).String(), (s.lease() / 6).String())
		if s.opts.SingleLeader {
			b.WriteString("single_leader = true\n")
		}
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "[hub]\nserver = %q\nca_file = %q\ntoken_file = %q\n\n", s.Hub.Server, s.CAFile, f.ControllerTokenFile)
	fmt.Fprintf(&b, "[mirror]\nttl = %q\nmax_stale = %q\n\n", s.opts.MirrorTTL.String(), s.opts.MirrorMaxStale.String())
	fmt.Fprintf(&b, "[reconcile]\nsweep_interval = %q\norphan_grace = %q\nretry_budget = %q\nmax_backoff = \"2s\"\nhealth_interval = \"2s\"\n",
		s.opts.SweepInterval.String(), s.opts.OrphanGrace.String(), s.opts.RetryBudget.String())
	if s.opts.DrainTimeout > 0 {
		fmt.Fprintf(&b, "drain_timeout = %q\n", s.opts.DrainTimeout.String())
	}
	// The stack's clients all come from loopback: let tests name their
	// source in X-Forwarded-For, as a router in front of the drop-box would.
	fmt.Fprintf(&b, "\n[ingest]\ntrusted_proxies = [\"127.0.0.0/8\", \"%s/32\"]\n", PodGateway)
	if s.opts.IngestMinFreeBytes > 0 {
		fmt.Fprintf(&b, "min_free_bytes = %d\n", s.opts.IngestMinFreeBytes)
	}
	if len(s.opts.PodNodeSelector) > 0 {
		b.WriteString("\n[pods]\nnode_selector = {")
		for i, k := range slices.Sorted(maps.Keys(s.opts.PodNodeSelector)) {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, " %q = %q", k, s.opts.PodNodeSelector[k])
		}
		b.WriteString(" }\n")
	}
	if s.opts.RunLiveOpensPerMinute > 0 {
		fmt.Fprintf(&b, "\n[run_live]\nopens_per_minute = %d\n", s.opts.RunLiveOpensPerMinute)
	}
	b.WriteString(podClasses)
	b.WriteString(s.fleetSection(rp.externalURL))
	for _, c := range spokes {
		e := s.ClusterEntry(c)
		e.IngestURL = rp.externalURL // a replica's pods push through it
		fmt.Fprintf(&b, "\n[[clusters]]\nname = %q\nserver = %q\nca_file = %q\nloop_namespace = %q\n", e.Name, e.Server, e.CAFile, e.LoopNamespace)
		if e.TokenSource == profile.TokenSourceRequest {
			b.WriteString("token_source = \"request\"\n")
		} else {
			fmt.Fprintf(&b, "token_file = %q\n", e.TokenFile)
		}
		fmt.Fprintf(&b, "turn_service_account = %q\ningest_url = %q\ningest_audience = %q\n", e.TurnServiceAccount, e.IngestURL, e.IngestAudience)
		if e.RunLive {
			b.WriteString("run_live = true\n")
		}
		if e.Capacity {
			b.WriteString("capacity = true\n")
		}
		if !c.hasGPUs() {
			b.WriteString("[clusters.classes.gpu]\nwithhold = true\n[clusters.classes.gpu-short]\nwithhold = true\n")
		}
	}
	return b.String()
}

// podClasses are the stack's pod classes: a light default (the benchmarks
// keep hundreds of its pods per spoke on one CPU node) and "gpu", offered
// only on spokes with GPU nodes (wharf's by default, every spoke's that
// --gpu-nodes names), so `crucible submit --class gpu` lands on a GPU node
// out of the box, and a placed gpu pod that cannot start moves on after
// 15 s (spill_after); "gpu-short" is gpu whose pods the
// scheduler cannot place within 10 s are failed (max_pending), and whose
// placed pods move to another spoke after 5 s (spill_after); "team-sre"
// is only for members of the hub group sre.
const podClasses = `
[[pods.classes]]
name = "standard"
default_for = ["loop", "turn"]
requests = { cpu = "50m", memory = "64Mi" }
limits = { memory = "1Gi" }
deadline = "6h"
max_deadline = "48h"
[pods.classes.allow]
resources = { cpu = { max = "16" }, memory = { max = "64Gi" } }

[[pods.classes]]
name = "gpu"
gpus = 1
requests = { cpu = "1", memory = "1Gi" }
limits = { memory = "16Gi" }
tolerations = [{ key = "nvidia.com/gpu", operator = "Exists", effect = "NoSchedule" }]
node_selector = { "nvidia.com/gpu.present" = "true" }
shm = "1Gi"
deadline = "6h"
max_deadline = "48h"
spill_after = "15s"
[pods.classes.allow]
gpus = { min = 1, max = 8 }
resources = { memory = { max = "64Gi" } }

[[pods.classes]]
name = "gpu-short"
gpus = 1
requests = { cpu = "1", memory = "1Gi" }
limits = { memory = "16Gi" }
tolerations = [{ key = "nvidia.com/gpu", operator = "Exists", effect = "NoSchedule" }]
node_selector = { "nvidia.com/gpu.present" = "true" }
deadline = "6h"
max_deadline = "48h"
max_pending = "10s"
spill_after = "5s"
[pods.classes.allow]
gpus = { min = 1, max = 8 }

[[pods.classes]]
name = "team-sre"
groups = ["sre"]
requests = { cpu = "50m", memory = "64Mi" }
`

// hasGPUs reports whether one of c's nodes advertises GPUs.
func (c *Cluster) hasGPUs() bool {
	for _, n := range c.Nodes {
		if q, ok := n.Capacity[ResourceGPU]; ok && !q.IsZero() {
			return true
		}
	}
	return false
}

// WebhookConfig renders the authn-webhook configuration of ADR-0048 for a
// spoke: one provider, the hub, whose keys come from the controller's mirror;
// audience = the spoke's name; only the given subjects; usernames prefixed
// hub: so they can never pass for the spoke's own identities. Keys refresh
// within a second here so that tests see a rotation quickly.
func (s *Stack) WebhookConfig(spoke string, allowedSubjects []string) string {
	trust := s.hubTrust(spoke, allowedSubjects)
	trust.SharedWith = s.guestsOf(spoke) // one provider: the webhook routes by issuer
	data, err := render.WebhookConfig(trust)
	if err != nil {
		panic(err) // a struct of strings always marshals
	}
	return "jwksMinRefreshInterval: 1s\n" + string(data)
}

func (s *Stack) hubTrust(spoke string, allowedSubjects []string) render.HubTrust {
	return render.HubTrust{
		Issuer: Issuer, DiscoveryURL: s.Federation.ControllerExternalURL + "/.well-known/openid-configuration",
		CertificateAuthority: string(s.ca.CertPEM), Audience: spoke, AllowedSubjects: allowedSubjects,
		UsernamePrefix: HubUsernamePrefix,
	}
}

// httpClient trusts the stack's CA, for readiness probes of what it started.
func (s *Stack) httpClient() *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.ca.CertPEM)
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
}

// httpClientAs is httpClient presenting the client certificate kp.
func (s *Stack) httpClientAs(kp KeyPair) (*http.Client, error) {
	cert, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		return nil, fmt.Errorf("load client certificate %s: %w", kp.CertFile, err)
	}
	c := s.httpClient()
	c.Transport.(*http.Transport).TLSClientConfig.Certificates = []tls.Certificate{cert}
	return c, nil
}

func get(ctx context.Context, c *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// writeFileAtomic replaces path so that a reader (client-go re-reading a
// token file) never sees a half-written file.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// builtinAuthenticationConfig is kube-apiserver's AuthenticationConfiguration
// equivalent of WebhookConfig, for a spoke whose own issuer differs from the
// hub's.
func (s *Stack) builtinAuthenticationConfig(spoke string) string {
	data, err := render.AuthenticationConfiguration(s.hubTrust(spoke, []string{HubSubject}))
	if err != nil {
		panic(err) // a struct of strings always marshals
	}
	return string(data)
}

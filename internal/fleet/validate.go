package fleet

import (
	"fmt"
	"maps"
	"math"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation"
)

// problem is one validation finding: the key path it is about and the line
// reported for it.
type problem struct {
	path, text string
}

type problems []problem

func (ps *problems) required(path string) {
	*ps = append(*ps, problem{path, path + ": required"})
}

// invalid reports a value that is present but wrong.
func (ps *problems) invalid(path, value, msg string) {
	*ps = append(*ps, problem{path, fmt.Sprintf("%s %q: %s", path, value, msg)})
}

func (ps *problems) add(path, msg string) {
	*ps = append(*ps, problem{path, path + ": " + msg})
}

// Validate checks a profile whose defaults are applied (Parse does both) and
// reports every problem at once in a *ProfileError; nil when it is valid.
func (p *Profile) Validate() error {
	ps := p.validate()
	if len(ps) == 0 {
		return nil
	}
	err := &ProfileError{}
	for _, pr := range ps {
		err.Problems = append(err.Problems, pr.text)
	}
	return err
}

func (p *Profile) validate() problems {
	var ps problems
	p.Controller.validate(&ps)
	p.Hub.validate(&ps)
	positive(&ps, "mirror.ttl", p.Mirror.TTL)
	positive(&ps, "mirror.max_stale", p.Mirror.MaxStale)
	p.Reconcile.validate(&ps)
	p.Pods.validate(&ps)
	p.Ingest.validate(&ps)
	p.API.validate(&ps, p.Controller.InternalListen)
	p.validateLeader(&ps)

	if len(p.Clusters) == 0 {
		ps.add("clusters", "at least one cluster is required")
	}
	first := map[string]int{}
	for i, c := range p.Clusters {
		path := fmt.Sprintf("clusters[%d]", i)
		c.validate(&ps, path)
		if c.Name == "" {
			continue
		}
		if j, dup := first[c.Name]; dup {
			ps.invalid(path+".name", c.Name, fmt.Sprintf("duplicate of clusters[%d].name", j))
		} else {
			first[c.Name] = i
		}
	}
	switch {
	case p.DefaultCluster != "":
		if _, ok := p.Cluster(p.DefaultCluster); !ok {
			ps.invalid("default_cluster", p.DefaultCluster, "no such cluster")
		}
	case len(p.Clusters) > 1:
		ps.add("default_cluster", "required when there is more than one cluster")
	}
	return ps
}

func (c *Controller) validate(ps *problems) {
	dnsLabel(ps, "controller.instance", c.Instance)
	listener(ps, "controller.internal_listen", c.InternalListen, "internal_tls_cert", c.InternalTLSCert != "")
	certPair(ps, "controller.internal_tls", c.InternalTLSCert, c.InternalTLSKey)
	listener(ps, "controller.external_listen", c.ExternalListen, "external_tls_cert", c.ExternalTLSCert != "")
	certPair(ps, "controller.external_tls", c.ExternalTLSCert, c.ExternalTLSKey)
	if c.ExternalURL == "" {
		ps.required("controller.external_url")
	} else {
		// The mirror serves its two paths at the root of the listener.
		checkURL(ps, "controller.external_url", c.ExternalURL, true, false)
	}
	if path, ok := strings.CutPrefix(c.Store, "sqlite:"); ok {
		if path == "" {
			ps.invalid("controller.store", c.Store, "sqlite: needs a file path, e.g. \"sqlite:crucible.db\"")
		}
	} else if !strings.HasPrefix(c.Store, "postgres://") && !strings.HasPrefix(c.Store, "postgresql://") {
		ps.invalid("controller.store", c.Store, "must be \"sqlite:<path>\" or a postgres:// URL")
	}
	if c.MaxRequestBytes < 0 {
		ps.invalid("controller.max_request_bytes", strconv.FormatInt(c.MaxRequestBytes, 10), "must be positive")
	}
	if c.MetricsListen != MetricsListenOff {
		if _, port, err := net.SplitHostPort(c.MetricsListen); err != nil {
			ps.invalid("controller.metrics_listen", c.MetricsListen, "must be host:port or \"off\"")
		} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			ps.invalid("controller.metrics_listen", c.MetricsListen, "port must be a number from 0 to 65535")
		}
	}
}

func (h *Hub) validate(ps *problems) {
	if h.Server == "" {
		// In-cluster: client-go reads the pod's own CA and token; a file
		// named here would be silently ignored.
		if h.CAFile != "" {
			ps.add("hub.ca_file", "only used with hub.server (in-cluster uses the pod's service-account CA)")
		}
		if h.TokenFile != "" {
			ps.add("hub.token_file", "only used with hub.server (in-cluster uses the pod's service-account token)")
		}
		return
	}
	checkURL(ps, "hub.server", h.Server, false, true)
	if h.TokenFile == "" {
		ps.add("hub.token_file", "required when hub.server is set")
	}
}

func (r *Reconcile) validate(ps *problems) {
	positive(ps, "reconcile.sweep_interval", r.SweepInterval)
	positive(ps, "reconcile.orphan_grace", r.OrphanGrace)
	positive(ps, "reconcile.retry_budget", r.RetryBudget)
	positive(ps, "reconcile.max_backoff", r.MaxBackoff)
	positive(ps, "reconcile.health_interval", r.HealthInterval)
	if r.MaxBackoff.Duration > r.RetryBudget.Duration && r.RetryBudget.Duration > 0 {
		ps.invalid("reconcile.max_backoff", r.MaxBackoff.String(), "must not exceed reconcile.retry_budget")
	}
}

func (in *Ingest) validate(ps *problems) {
	if in.MaxBodyBytes < 0 {
		ps.invalid("ingest.max_body_bytes", strconv.FormatInt(in.MaxBodyBytes, 10), "must be positive")
	}
	positive(ps, "ingest.accept_ttl", in.AcceptTTL)
	positive(ps, "ingest.negative_ttl", in.NegativeTTL)
	if in.CacheSize < 0 {
		ps.invalid("ingest.cache_size", strconv.Itoa(in.CacheSize), "must be positive")
	}
	if in.RatePerSource < 0 {
		ps.invalid("ingest.rate_per_source", strconv.FormatFloat(float64(in.RatePerSource), 'g', -1, 32), "must be positive")
	}
	if in.RateBurst < 0 {
		ps.invalid("ingest.rate_burst", strconv.Itoa(in.RateBurst), "must be positive")
	}
	if in.RatePerPod < 0 {
		ps.invalid("ingest.rate_per_pod", strconv.FormatFloat(float64(in.RatePerPod), 'g', -1, 32), "must be positive")
	}
	if in.RateBurstPerPod < 0 {
		ps.invalid("ingest.rate_burst_per_pod", strconv.Itoa(in.RateBurstPerPod), "must be positive")
	}
	for _, lim := range []struct {
		path string
		v    int64
	}{
		{"ingest.max_kinds_per_pod", int64(in.MaxKindsPerPod)}, {"ingest.max_bytes_per_pod", in.MaxBytesPerPod},
		{"ingest.min_free_bytes", in.MinFreeBytes}, {"ingest.max_staging_per_pod", int64(in.MaxStagingPerPod)},
		{"ingest.min_upload_rate", in.MinUploadRate},
	} {
		if lim.v < 0 {
			ps.invalid(lim.path, strconv.FormatInt(lim.v, 10), "must be positive")
		}
	}
	positive(ps, "ingest.upload_rate_window", in.UploadRateWindow)
	for i, cidr := range in.TrustedProxies {
		if _, err := netip.ParsePrefix(cidr); err != nil {
			ps.invalid(fmt.Sprintf("ingest.trusted_proxies[%d]", i), cidr, "must be a CIDR such as 10.0.0.0/8")
		}
	}
}

func (p *Pods) validate(ps *problems) {
	const path = "pods.ingest_token_expiration"
	switch d := p.IngestTokenExpiration.Duration; {
	case d < MinIngestTokenExpiration:
		ps.invalid(path, d.String(), "must be at least 10m (the kubelet's minimum)")
	case d > MaxIngestTokenExpiration:
		ps.invalid(path, d.String(), "must be at most 2^32 seconds")
	case d%time.Second != 0:
		ps.invalid(path, d.String(), "must be whole seconds")
	}
	for _, k := range slices.Sorted(maps.Keys(p.NodeSelector)) {
		kp := joinKey("pods.node_selector", k)
		if len(validation.IsQualifiedName(k)) > 0 {
			ps.invalid(kp, k, "key must be a label key (an optional DNS-subdomain prefix and '/', then at most 63 of alphanumerics, '-', '_', '.')")
		}
		if v := p.NodeSelector[k]; len(validation.IsValidLabelValue(v)) > 0 {
			ps.invalid(kp, v, "must be a label value (at most 63 of alphanumerics, '-', '_', '.', beginning and ending alphanumeric)")
		}
	}
	switch p.ImagePullPolicy {
	case "", "Always", "IfNotPresent", "Never":
	default:
		ps.invalid("pods.image_pull_policy", p.ImagePullPolicy, "must be Always, IfNotPresent or Never")
	}
	if strings.ContainsFunc(p.PushImage, func(r rune) bool { return r <= ' ' || r == 0x7f || r == utf8.RuneError }) {
		ps.invalid("pods.push_image", p.PushImage, "must be an image reference, without whitespace or control characters")
	}
}

func (c *ClusterEntry) validate(ps *problems, path string) {
	if c.Name == "" {
		ps.required(path + ".name")
	} else {
		dnsLabel(ps, path+".name", c.Name)
	}
	if c.Server == "" {
		ps.required(path + ".server")
	} else {
		checkURL(ps, path+".server", c.Server, false, true)
	}
	if c.CAFile == "" {
		ps.required(path + ".ca_file")
	}
	if c.TokenFile == "" {
		ps.required(path + ".token_file")
	}
	if c.LoopNamespace == "" {
		ps.required(path + ".loop_namespace")
	} else {
		dnsLabel(ps, path+".loop_namespace", c.LoopNamespace)
	}
	if c.TurnServiceAccount == "" {
		ps.required(path + ".turn_service_account")
	} else if len(validation.IsDNS1123Subdomain(c.TurnServiceAccount)) > 0 {
		ps.invalid(path+".turn_service_account", c.TurnServiceAccount, "must be a DNS subdomain (a service account name)")
	}
	if c.IngestURL == "" {
		ps.required(path + ".ingest_url")
	} else {
		checkURL(ps, path+".ingest_url", c.IngestURL, true, true)
	}
	if c.IngestAudience == "" {
		ps.required(path + ".ingest_audience")
	} else if strings.ContainsFunc(c.IngestAudience, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		ps.invalid(path+".ingest_audience", c.IngestAudience, "must not contain spaces or control characters")
	}
	if !(c.QPS > 0) || math.IsInf(float64(c.QPS), 0) {
		ps.invalid(path+".qps", strconv.FormatFloat(float64(c.QPS), 'g', -1, 32), "must be positive")
	}
	if c.Burst <= 0 {
		ps.invalid(path+".burst", strconv.Itoa(c.Burst), "must be positive")
	}
}

func dnsLabel(ps *problems, path, v string) {
	if len(validation.IsDNS1123Label(v)) > 0 {
		ps.invalid(path, v, "must be a DNS label")
	}
}

func positive(ps *problems, path string, d Duration) {
	if d.Duration <= 0 {
		ps.invalid(path, d.String(), "must be positive")
	}
}

// certPair requires a certificate and its key together; prefix is the keys'
// common stem, e.g. "controller.internal_tls".
func certPair(ps *problems, prefix, cert, key string) {
	switch {
	case cert != "" && key == "":
		ps.add(prefix+"_key", "required when "+lastKey(prefix)+"_cert is set")
	case cert == "" && key != "":
		ps.add(prefix+"_cert", "required when "+lastKey(prefix)+"_key is set")
	}
}

func lastKey(path string) string { return path[strings.LastIndexByte(path, '.')+1:] }

// listener checks a host:port to listen on; without TLS only a loopback
// address may serve plain HTTP (tokens cross the listeners).
func listener(ps *problems, path, addr, certKey string, tls bool) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		ps.invalid(path, addr, "must be host:port")
		return
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		ps.invalid(path, addr, "port must be a number from 0 to 65535")
		return
	}
	if !tls && !isLoopback(host) {
		ps.invalid(path, addr, "plain HTTP (no "+certKey+") is only allowed on a loopback address")
	}
}

// checkURL accepts an absolute https URL (http too on a loopback host when
// httpLoopback) without credentials, query or fragment, and without a path
// unless pathAllowed.
func checkURL(ps *problems, path, raw string, httpLoopback, pathAllowed bool) {
	u, err := url.Parse(raw)
	if err != nil {
		ps.invalid(path, raw, "not a URL")
		return
	}
	if !u.IsAbs() || u.Host == "" {
		ps.invalid(path, raw, "must be an absolute URL")
		return
	}
	var msgs []string
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && httpLoopback && isLoopback(u.Hostname()):
	case u.Scheme == "http" && httpLoopback:
		msgs = append(msgs, "http is only allowed on a loopback host")
	default:
		msgs = append(msgs, "scheme must be https")
	}
	if u.User != nil {
		msgs = append(msgs, "must not contain credentials")
	}
	if u.RawQuery != "" || u.ForceQuery {
		msgs = append(msgs, "must not have a query")
	}
	if u.Fragment != "" || strings.Contains(raw, "#") {
		msgs = append(msgs, "must not have a fragment")
	}
	if !pathAllowed && u.Path != "" && u.Path != "/" {
		msgs = append(msgs, "must not have a path")
	}
	if len(msgs) > 0 {
		ps.invalid(path, raw, strings.Join(msgs, "; "))
	}
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

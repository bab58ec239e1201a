package fleet

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/google/go-cmp/cmp"
)

const examplePath = "../../examples/crucible.toml"

// minimal is the smallest valid profile, as a generic tree the cases edit.
func minimal() map[string]any {
	return map[string]any{
		"controller": map[string]any{"external_url": "https://crucible.example.com"},
		"clusters":   []map[string]any{clusterTree("wharf")},
	}
}

func clusterTree(name string) map[string]any {
	return map[string]any{
		"name":                 name,
		"server":               "https://" + name + ".example.com:6443",
		"ca_file":              "/etc/crucible/" + name + "/ca.crt",
		"token_file":           "/var/run/secrets/crucible/" + name + "/token",
		"loop_namespace":       "loops",
		"turn_service_account": "crucible-turn",
		"ingest_url":           "https://crucible.example.com",
		"ingest_audience":      "crucible-ingest",
	}
}

// table returns the sub-table at key, creating it.
func table(m map[string]any, key string) map[string]any {
	t, ok := m[key].(map[string]any)
	if !ok {
		t = map[string]any{}
		m[key] = t
	}
	return t
}

func cluster(m map[string]any, i int) map[string]any { return m["clusters"].([]map[string]any)[i] }

func encode(t testing.TB, m map[string]any) []byte {
	t.Helper()
	data, err := toml.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// wantDefaults is the profile minimal() parses to.
func wantDefaults() *Profile {
	return &Profile{
		Controller: Controller{
			Instance:        "crucible",
			InternalListen:  "127.0.0.1:8080",
			ExternalListen:  "127.0.0.1:8443",
			ExternalURL:     "https://crucible.example.com",
			Store:           "sqlite:crucible.db",
			ArtifactsDir:    "artifacts",
			MaxRequestBytes: 1 << 20,
			MetricsListen:   "127.0.0.1:9090",
		},
		API: API{Auth: "none", Namespace: "crucible", ProxyUserHeader: "X-Auth-Request-User", ProxyGroupsHeader: "X-Auth-Request-Groups",
			AllowedHosts: []string{"localhost", "127.0.0.1", "::1"}, TokenAcceptTTL: Duration{10 * time.Second}, TokenNegativeTTL: Duration{5 * time.Second},
			AccessAllowTTL: Duration{10 * time.Second}, AccessDenyTTL: Duration{5 * time.Second}, CacheSize: 10000, PageSize: 500},
		LeaderElection: LeaderElection{LeaseName: "crucible-leader", LeaseNamespace: "crucible", LeaseDuration: Duration{15 * time.Second},
			RenewDeadline: Duration{10 * time.Second}, RetryPeriod: Duration{2 * time.Second}},
		Mirror: Mirror{TTL: Duration{30 * time.Second}, MaxStale: Duration{10 * time.Minute}},
		Reconcile: Reconcile{
			SweepInterval:  Duration{time.Minute},
			OrphanGrace:    Duration{10 * time.Minute},
			RetryBudget:    Duration{2 * time.Minute},
			MaxBackoff:     Duration{10 * time.Second},
			HealthInterval: Duration{15 * time.Second},
		},
		Pods: Pods{IngestTokenExpiration: Duration{time.Hour}},
		Ingest: Ingest{MaxBodyBytes: 64 << 20, AcceptTTL: Duration{5 * time.Minute}, NegativeTTL: Duration{10 * time.Second},
			CacheSize: 10000, RatePerSource: 20, RateBurst: 40, RatePerPod: 10, RateBurstPerPod: 20, MaxKindsPerPod: 32, MaxBytesPerPod: 1 << 30, MinFreeBytes: 1 << 30,
			MaxStagingPerPod: 2, MinUploadRate: 4 << 10, UploadRateWindow: Duration{30 * time.Second}},
		DefaultCluster: "wharf",
		Clusters: []ClusterEntry{{
			Name:               "wharf",
			Server:             "https://wharf.example.com:6443",
			CAFile:             "/etc/crucible/wharf/ca.crt",
			TokenFile:          "/var/run/secrets/crucible/wharf/token",
			LoopNamespace:      "loops",
			TurnServiceAccount: "crucible-turn",
			IngestURL:          "https://crucible.example.com",
			IngestAudience:     "crucible-ingest",
			QPS:                500,
			Burst:              1000,
		}},
	}
}

func TestParseDefaults(t *testing.T) {
	got, err := Parse(encode(t, minimal()))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantDefaults(), got); diff != "" {
		t.Errorf("Parse(minimal) (-want +got):\n%s", diff)
	}
}

func TestParseExplicitValuesKept(t *testing.T) {
	m := minimal()
	table(m, "mirror")["ttl"] = "5s"
	table(m, "reconcile")["max_backoff"] = "1s"
	table(m, "pods")["ingest_token_expiration"] = "10m"
	table(table(m, "pods"), "node_selector")["kubernetes.io/arch"] = "amd64"
	cluster(m, 0)["qps"] = 2.5
	cluster(m, 0)["burst"] = 3
	table(m, "ingest")["rate_per_pod"] = 2.5
	table(m, "ingest")["rate_burst_per_pod"] = 5
	table(m, "ingest")["max_kinds_per_pod"] = 4
	table(m, "ingest")["upload_rate_window"] = "1m"
	got, err := Parse(encode(t, m))
	if err != nil {
		t.Fatal(err)
	}
	want := wantDefaults()
	want.Mirror.TTL = Duration{5 * time.Second}
	want.Reconcile.MaxBackoff = Duration{time.Second}
	want.Pods.IngestTokenExpiration = Duration{10 * time.Minute}
	want.Pods.NodeSelector = map[string]string{"kubernetes.io/arch": "amd64"}
	want.Clusters[0].QPS = 2.5
	want.Clusters[0].Burst = 3
	want.Ingest.RatePerPod = 2.5
	want.Ingest.RateBurstPerPod = 5
	want.Ingest.MaxKindsPerPod = 4
	want.Ingest.UploadRateWindow = Duration{time.Minute}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestLoadExample(t *testing.T) {
	got, err := Load(examplePath)
	if err != nil {
		t.Fatal(err)
	}
	want := &Profile{
		Controller: Controller{
			Instance:        "crucible",
			InternalListen:  "127.0.0.1:8080",
			ExternalListen:  "0.0.0.0:8443",
			ExternalURL:     "https://crucible-ext.hub.example.com",
			ExternalTLSCert: "/etc/crucible/external-tls/tls.crt",
			ExternalTLSKey:  "/etc/crucible/external-tls/tls.key",
			Store:           "sqlite:crucible.db",
			ArtifactsDir:    "artifacts",
			MaxRequestBytes: 1 << 20,
			MetricsListen:   "127.0.0.1:9090",
		},
		API:            wantDefaults().API,
		LeaderElection: wantDefaults().LeaderElection,
		Mirror:         Mirror{TTL: Duration{30 * time.Second}, MaxStale: Duration{10 * time.Minute}},
		Reconcile: Reconcile{
			SweepInterval:  Duration{time.Minute},
			OrphanGrace:    Duration{10 * time.Minute},
			RetryBudget:    Duration{2 * time.Minute},
			MaxBackoff:     Duration{10 * time.Second},
			HealthInterval: Duration{15 * time.Second},
		},
		Pods: Pods{
			IngestTokenExpiration: Duration{time.Hour},
			NodeSelector:          map[string]string{"nvidia.com/gpu.present": "true"},
			ImagePullPolicy:       "IfNotPresent",
		},
		Ingest: Ingest{MaxBodyBytes: 64 << 20, AcceptTTL: Duration{5 * time.Minute}, NegativeTTL: Duration{10 * time.Second},
			CacheSize: 10000, RatePerSource: 20, RateBurst: 40, RatePerPod: 10, RateBurstPerPod: 20, TrustedProxies: []string{"10.128.0.0/14"},
			MaxKindsPerPod: 32, MaxBytesPerPod: 1 << 30, MinFreeBytes: 1 << 30, MaxStagingPerPod: 2, MinUploadRate: 4 << 10,
			UploadRateWindow: Duration{30 * time.Second}},
		DefaultCluster: "wharf",
		Clusters: []ClusterEntry{{
			Name:               "wharf",
			Server:             "https://api.wharf.example.com:6443",
			CAFile:             "/etc/crucible/wharf/ca.crt",
			TokenFile:          "/var/run/secrets/crucible/wharf/token",
			LoopNamespace:      "loops",
			TurnServiceAccount: "crucible-turn",
			IngestURL:          "https://crucible-ext.hub.example.com",
			IngestAudience:     "crucible-ingest",
			QPS:                500,
			Burst:              1000,
		}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Load(%s) (-want +got):\n%s", examplePath, diff)
	}
}

func TestParseProblems(t *testing.T) {
	tests := []struct {
		name string
		edit func(m map[string]any) // applied to minimal()
		raw  string                 // used instead of edit when set
		want []string
	}{
		// controller
		{
			name: "instance not a DNS label",
			edit: func(m map[string]any) { table(m, "controller")["instance"] = "Crucible_1" },
			want: []string{`controller.instance "Crucible_1": must be a DNS label`},
		},
		{
			name: "internal_listen not host:port",
			edit: func(m map[string]any) { table(m, "controller")["internal_listen"] = "8080" },
			want: []string{`controller.internal_listen "8080": must be host:port`},
		},
		{
			name: "internal_listen bad port",
			edit: func(m map[string]any) { table(m, "controller")["internal_listen"] = "127.0.0.1:http" },
			want: []string{`controller.internal_listen "127.0.0.1:http": port must be a number from 0 to 65535`},
		},
		{
			name: "internal_listen plain HTTP off loopback",
			edit: func(m map[string]any) { table(m, "controller")["internal_listen"] = "0.0.0.0:8080" },
			want: []string{`controller.internal_listen "0.0.0.0:8080": plain HTTP (no internal_tls_cert) is only allowed on a loopback address`,
				`api.auth "none": only allowed when controller.internal_listen is a loopback address, not "0.0.0.0:8080": anyone reaching it could run any image on the spokes; set api.auth to "kubernetes" or "proxy"`},
		},
		{
			name: "internal TLS on any address",
			edit: func(m map[string]any) {
				c := table(m, "controller")
				c["internal_listen"] = ":8080"
				c["internal_tls_cert"] = "tls.crt"
				c["internal_tls_key"] = "tls.key"
				m["api"] = map[string]any{"auth": "kubernetes"}
			},
		},
		{
			name: "auth none with TLS on any address",
			edit: func(m map[string]any) {
				c := table(m, "controller")
				c["internal_listen"] = "10.1.2.3:8080"
				c["internal_tls_cert"] = "tls.crt"
				c["internal_tls_key"] = "tls.key"
			},
			want: []string{`api.auth "none": only allowed when controller.internal_listen is a loopback address, not "10.1.2.3:8080": anyone reaching it could run any image on the spokes; set api.auth to "kubernetes" or "proxy"`},
		},
		{
			name: "auth unknown",
			edit: func(m map[string]any) { m["api"] = map[string]any{"auth": "basic"} },
			want: []string{`api.auth "basic": must be none, kubernetes or proxy`},
		},
		{
			name: "auth proxy without CIDRs",
			edit: func(m map[string]any) { m["api"] = map[string]any{"auth": "proxy"} },
			want: []string{`api.proxy_cidrs: required when api.auth is "proxy" (the SSO proxy's addresses)`},
		},
		{
			name: "api values all wrong",
			edit: func(m map[string]any) {
				m["api"] = map[string]any{"auth": "proxy", "proxy_cidrs": []any{"10.0.0.0/8", "proxy"}, "proxy_user_header": "X User",
					"proxy_groups_header": "", "allowed_hosts": []any{"example.com:8080", "ok.example.com", "a/b"}, "namespace": "Crucible",
					"token_accept_ttl": "-1s", "access_deny_ttl": "0s", "cache_size": -1, "page_size": 10001}
				table(m, "controller")["metrics_listen"] = "9090"
			},
			want: []string{
				`controller.metrics_listen "9090": must be host:port or "off"`,
				`api.namespace "Crucible": must be a DNS label`,
				`api.proxy_cidrs[1] "proxy": must be a CIDR such as 10.0.0.0/8`,
				`api.proxy_user_header "X User": must be an HTTP header name`,
				`api.allowed_hosts[0] "example.com:8080": must be a host name or IP address without a port`,
				`api.allowed_hosts[2] "a/b": must be a host name or IP address without a port`,
				`api.token_accept_ttl "-1s": must be positive`,
				`api.cache_size "-1": must be positive`,
				`api.page_size "10001": must be from 1 to 10000`,
			},
		},
		{
			name: "api proxy and metrics off",
			edit: func(m map[string]any) {
				m["api"] = map[string]any{"auth": "proxy", "proxy_cidrs": []any{"10.0.0.0/8", "::1/128"}, "allowed_hosts": []any{"crucible.example.com", "::1"}}
				table(m, "controller")["metrics_listen"] = "off"
			},
		},
		{
			name: "internal_tls_cert without key",
			edit: func(m map[string]any) { table(m, "controller")["internal_tls_cert"] = "tls.crt" },
			want: []string{`controller.internal_tls_key: required when internal_tls_cert is set`},
		},
		{
			name: "internal_tls_key without cert",
			edit: func(m map[string]any) { table(m, "controller")["internal_tls_key"] = "tls.key" },
			want: []string{`controller.internal_tls_cert: required when internal_tls_key is set`},
		},
		{
			name: "external_listen plain HTTP off loopback",
			edit: func(m map[string]any) { table(m, "controller")["external_listen"] = "10.0.0.1:8443" },
			want: []string{`controller.external_listen "10.0.0.1:8443": plain HTTP (no external_tls_cert) is only allowed on a loopback address`},
		},
		{
			name: "external_listen on localhost",
			edit: func(m map[string]any) { table(m, "controller")["external_listen"] = "localhost:0" },
		},
		{
			name: "external_tls_cert without key",
			edit: func(m map[string]any) { table(m, "controller")["external_tls_cert"] = "tls.crt" },
			want: []string{`controller.external_tls_key: required when external_tls_cert is set`},
		},
		{
			name: "external_tls_key without cert",
			edit: func(m map[string]any) { table(m, "controller")["external_tls_key"] = "tls.key" },
			want: []string{`controller.external_tls_cert: required when external_tls_key is set`},
		},
		{
			name: "external_url missing",
			edit: func(m map[string]any) { delete(table(m, "controller"), "external_url") },
			want: []string{`controller.external_url: required`},
		},
		{
			name: "external_url http off loopback",
			edit: func(m map[string]any) { table(m, "controller")["external_url"] = "http://crucible.example.com" },
			want: []string{`controller.external_url "http://crucible.example.com": http is only allowed on a loopback host`},
		},
		{
			name: "external_url http on loopback",
			edit: func(m map[string]any) { table(m, "controller")["external_url"] = "http://127.0.0.1:8443" },
		},
		{
			name: "external_url relative",
			edit: func(m map[string]any) { table(m, "controller")["external_url"] = "crucible.example.com" },
			want: []string{`controller.external_url "crucible.example.com": must be an absolute URL`},
		},
		{
			name: "external_url with path, query, fragment and credentials",
			edit: func(m map[string]any) {
				table(m, "controller")["external_url"] = "https://u:p@crucible.example.com/x?a=1#f"
			},
			want: []string{`controller.external_url "https://u:p@crucible.example.com/x?a=1#f": must not contain credentials; must not have a query; must not have a fragment; must not have a path`},
		},
		{
			name: "external_url other scheme",
			edit: func(m map[string]any) { table(m, "controller")["external_url"] = "ftp://crucible.example.com" },
			want: []string{`controller.external_url "ftp://crucible.example.com": scheme must be https`},
		},
		{
			name: "store unknown scheme",
			edit: func(m map[string]any) { table(m, "controller")["store"] = "mysql://db" },
			want: []string{`controller.store "mysql://db": must be "sqlite:<path>" or a postgres:// URL`},
		},
		{
			name: "store sqlite without path",
			edit: func(m map[string]any) { table(m, "controller")["store"] = "sqlite:" },
			want: []string{`controller.store "sqlite:": sqlite: needs a file path, e.g. "sqlite:crucible.db"`},
		},
		{
			name: "store postgres",
			edit: func(m map[string]any) { table(m, "controller")["store"] = "postgresql://crucible@db/crucible" },
		},
		{
			name: "max_request_bytes negative",
			edit: func(m map[string]any) { table(m, "controller")["max_request_bytes"] = -1 },
			want: []string{`controller.max_request_bytes "-1": must be positive`},
		},
		// hub
		{
			name: "hub server without token_file",
			edit: func(m map[string]any) { table(m, "hub")["server"] = "https://hub.example.com:6443" },
			want: []string{`hub.token_file: required when hub.server is set`},
		},
		{
			name: "hub server http",
			edit: func(m map[string]any) {
				table(m, "hub")["server"] = "http://127.0.0.1:6443"
				table(m, "hub")["token_file"] = "/token"
			},
			want: []string{`hub.server "http://127.0.0.1:6443": scheme must be https`},
		},
		{
			name: "hub ca_file and token_file without server",
			edit: func(m map[string]any) {
				table(m, "hub")["ca_file"] = "/ca.crt"
				table(m, "hub")["token_file"] = "/token"
			},
			want: []string{
				`hub.ca_file: only used with hub.server (in-cluster uses the pod's service-account CA)`,
				`hub.token_file: only used with hub.server (in-cluster uses the pod's service-account token)`,
			},
		},
		// mirror
		{
			name: "mirror.ttl negative",
			edit: func(m map[string]any) { table(m, "mirror")["ttl"] = "-1s" },
			want: []string{`mirror.ttl "-1s": must be positive`},
		},
		{
			name: "mirror.ttl not a duration",
			edit: func(m map[string]any) { table(m, "mirror")["ttl"] = "soon" },
			want: []string{`mirror.ttl "soon": not a duration (want e.g. "30s", "10m", "1h")`},
		},
		{
			name: "mirror.max_stale negative",
			edit: func(m map[string]any) { table(m, "mirror")["max_stale"] = "-10m" },
			want: []string{`mirror.max_stale "-10m0s": must be positive`},
		},
		// reconcile
		{
			name: "reconcile durations negative",
			edit: func(m map[string]any) {
				r := table(m, "reconcile")
				for _, k := range []string{"sweep_interval", "orphan_grace", "retry_budget", "max_backoff", "health_interval"} {
					r[k] = "-1s"
				}
			},
			want: []string{
				`reconcile.sweep_interval "-1s": must be positive`,
				`reconcile.orphan_grace "-1s": must be positive`,
				`reconcile.retry_budget "-1s": must be positive`,
				`reconcile.max_backoff "-1s": must be positive`,
				`reconcile.health_interval "-1s": must be positive`,
			},
		},
		{
			name: "max_backoff above retry_budget",
			edit: func(m map[string]any) {
				table(m, "reconcile")["retry_budget"] = "5s"
				table(m, "reconcile")["max_backoff"] = "6s"
			},
			want: []string{`reconcile.max_backoff "6s": must not exceed reconcile.retry_budget`},
		},
		// ingest
		{
			name: "upload quotas and pacing negative",
			edit: func(m map[string]any) {
				in := table(m, "ingest")
				in["max_kinds_per_pod"], in["max_bytes_per_pod"], in["min_free_bytes"] = -1, -2, -3
				in["max_staging_per_pod"], in["min_upload_rate"], in["upload_rate_window"] = -4, -5, "-1s"
			},
			want: []string{
				`ingest.max_kinds_per_pod "-1": must be positive`,
				`ingest.max_bytes_per_pod "-2": must be positive`,
				`ingest.min_free_bytes "-3": must be positive`,
				`ingest.max_staging_per_pod "-4": must be positive`,
				`ingest.min_upload_rate "-5": must be positive`,
				`ingest.upload_rate_window "-1s": must be positive`,
			},
		},
		{
			name: "upload_rate_window not a duration",
			edit: func(m map[string]any) { table(m, "ingest")["upload_rate_window"] = 30 },
			want: []string{`ingest.upload_rate_window: must be a string such as "30s", not an integer`},
		},
		// pods
		{
			name: "per-pod rates negative",
			edit: func(m map[string]any) {
				table(m, "ingest")["rate_per_pod"] = -1.5
				table(m, "ingest")["rate_burst_per_pod"] = -2
			},
			want: []string{
				`ingest.rate_per_pod "-1.5": must be positive`,
				`ingest.rate_burst_per_pod "-2": must be positive`,
			},
		},
		{
			name: "per-pod rate of the wrong type",
			edit: func(m map[string]any) { table(m, "ingest")["rate_burst_per_pod"] = "many" },
			want: []string{"ingest.rate_burst_per_pod: must be an integer, not a string"},
		},
		{
			name: "ingest token expiration below the kubelet minimum",
			edit: func(m map[string]any) { table(m, "pods")["ingest_token_expiration"] = "9m59s" },
			want: []string{`pods.ingest_token_expiration "9m59s": must be at least 10m (the kubelet's minimum)`},
		},
		{
			name: "ingest token expiration above 2^32 s",
			edit: func(m map[string]any) { table(m, "pods")["ingest_token_expiration"] = "1193047h" },
			want: []string{`pods.ingest_token_expiration "1193047h0m0s": must be at most 2^32 seconds`},
		},
		{
			name: "ingest token expiration fractional",
			edit: func(m map[string]any) { table(m, "pods")["ingest_token_expiration"] = "20m0.5s" },
			want: []string{`pods.ingest_token_expiration "20m0.5s": must be whole seconds`},
		},
		{
			name: "node_selector bad key and value",
			edit: func(m map[string]any) {
				table(table(m, "pods"), "node_selector")["bad key"] = "ok"
				table(table(m, "pods"), "node_selector")["disk"] = "not ok!"
			},
			want: []string{
				`pods.node_selector."bad key" "bad key": key must be a label key (an optional DNS-subdomain prefix and '/', then at most 63 of alphanumerics, '-', '_', '.')`,
				`pods.node_selector.disk "not ok!": must be a label value (at most 63 of alphanumerics, '-', '_', '.', beginning and ending alphanumeric)`,
			},
		},
		{
			name: "image_pull_policy unknown",
			edit: func(m map[string]any) { table(m, "pods")["image_pull_policy"] = "always" },
			want: []string{`pods.image_pull_policy "always": must be Always, IfNotPresent or Never`},
		},
		{
			name: "push_image with whitespace",
			edit: func(m map[string]any) { table(m, "pods")["push_image"] = "ghcr.io/x/crucible:1 --privileged" },
			want: []string{`pods.push_image "ghcr.io/x/crucible:1 --privileged": must be an image reference, without whitespace or control characters`},
		},
		// clusters
		{
			name: "no clusters",
			edit: func(m map[string]any) { delete(m, "clusters") },
			want: []string{`clusters: at least one cluster is required`},
		},
		{
			name: "every required cluster key missing",
			edit: func(m map[string]any) { m["clusters"] = []map[string]any{{"qps": 1}} },
			want: []string{
				`clusters[0].name: required`,
				`clusters[0].server: required`,
				`clusters[0].ca_file: required`,
				`clusters[0].token_file: required`,
				`clusters[0].loop_namespace: required`,
				`clusters[0].turn_service_account: required`,
				`clusters[0].ingest_url: required`,
				`clusters[0].ingest_audience: required`,
			},
		},
		{
			name: "token_file missing in the second cluster",
			edit: func(m map[string]any) {
				c := clusterTree("dock")
				delete(c, "token_file")
				m["clusters"] = append(m["clusters"].([]map[string]any), c)
				m["default_cluster"] = "wharf"
			},
			want: []string{`clusters[1].token_file: required`},
		},
		{
			name: "name not a DNS label",
			edit: func(m map[string]any) { cluster(m, 0)["name"] = "Wharf" },
			want: []string{
				`clusters[0].name "Wharf": must be a DNS label`,
			},
		},
		{
			name: "duplicate name",
			edit: func(m map[string]any) {
				m["clusters"] = append(m["clusters"].([]map[string]any), clusterTree("dock"), clusterTree("wharf"))
				m["default_cluster"] = "dock"
			},
			want: []string{`clusters[2].name "wharf": duplicate of clusters[0].name`},
		},
		{
			name: "server http",
			edit: func(m map[string]any) { cluster(m, 0)["server"] = "http://127.0.0.1:6443" },
			want: []string{`clusters[0].server "http://127.0.0.1:6443": scheme must be https`},
		},
		{
			name: "server with path prefix",
			edit: func(m map[string]any) { cluster(m, 0)["server"] = "https://proxy.example.com/k8s/wharf" },
		},
		{
			name: "loop_namespace not a DNS label",
			edit: func(m map[string]any) { cluster(m, 0)["loop_namespace"] = "loops.gpu" },
			want: []string{`clusters[0].loop_namespace "loops.gpu": must be a DNS label`},
		},
		{
			name: "turn_service_account not a DNS subdomain",
			edit: func(m map[string]any) { cluster(m, 0)["turn_service_account"] = "crucible_turn" },
			want: []string{`clusters[0].turn_service_account "crucible_turn": must be a DNS subdomain (a service account name)`},
		},
		{
			name: "ingest_url http off loopback",
			edit: func(m map[string]any) { cluster(m, 0)["ingest_url"] = "http://crucible.example.com" },
			want: []string{`clusters[0].ingest_url "http://crucible.example.com": http is only allowed on a loopback host`},
		},
		{
			name: "ingest_url with path prefix",
			edit: func(m map[string]any) { cluster(m, 0)["ingest_url"] = "https://hub.example.com/crucible" },
		},
		{
			name: "ingest_audience with a space",
			edit: func(m map[string]any) { cluster(m, 0)["ingest_audience"] = "crucible ingest" },
			want: []string{`clusters[0].ingest_audience "crucible ingest": must not contain spaces or control characters`},
		},
		{
			name: "qps and burst negative",
			edit: func(m map[string]any) {
				cluster(m, 0)["qps"] = -1.5
				cluster(m, 0)["burst"] = -2
			},
			want: []string{
				`clusters[0].qps "-1.5": must be positive`,
				`clusters[0].burst "-2": must be positive`,
			},
		},
		{
			name: "qps NaN",
			raw:  strings.Replace(string(encode(t, minimal())), "[[clusters]]", "[[clusters]]\n  qps = nan", 1),
			want: []string{`clusters[0].qps "NaN": must be positive`},
		},
		// default_cluster
		{
			name: "default_cluster unknown",
			edit: func(m map[string]any) { m["default_cluster"] = "nope" },
			want: []string{`default_cluster "nope": no such cluster`},
		},
		{
			name: "default_cluster missing with two clusters",
			edit: func(m map[string]any) {
				m["clusters"] = append(m["clusters"].([]map[string]any), clusterTree("dock"))
			},
			want: []string{`default_cluster: required when there is more than one cluster`},
		},
		{
			name: "default_cluster picks the second of two",
			edit: func(m map[string]any) {
				m["clusters"] = append(m["clusters"].([]map[string]any), clusterTree("dock"))
				m["default_cluster"] = "dock"
			},
		},
		// unknown keys, case-sensitively, at every depth
		{
			name: "unknown keys at several depths",
			edit: func(m map[string]any) {
				m["listen"] = ":80"
				table(m, "controller")["listen"] = ":80"
				table(m, "extra")["a"] = map[string]any{"b": 1}
				table(m, "mirror")["TTL"] = "1s"
				m["clusters"] = append(m["clusters"].([]map[string]any), clusterTree("dock"))
				cluster(m, 1)["tokenfile"] = "/token"
				cluster(m, 1)["Name"] = "shadow"
				m["default_cluster"] = "wharf"
				m["a.b"] = 1
			},
			want: []string{
				`unknown key "a.b"`,
				`unknown key clusters[1].Name`,
				`unknown key clusters[1].tokenfile`,
				`unknown key controller.listen`,
				`unknown key extra`,
				`unknown key listen`,
				`unknown key mirror.TTL`,
			},
		},
		{
			name: "unknown keys reported with validation problems",
			edit: func(m map[string]any) {
				table(m, "controller")["listen"] = ":80"
				delete(cluster(m, 0), "ca_file")
				m["default_cluster"] = "nope"
			},
			want: []string{
				`unknown key controller.listen`,
				`clusters[0].ca_file: required`,
				`default_cluster "nope": no such cluster`,
			},
		},
		// wrong types
		{
			name: "wrong types",
			edit: func(m map[string]any) {
				table(m, "controller")["max_request_bytes"] = "1MiB"
				table(m, "mirror")["ttl"] = 30
				table(m, "hub")["server"] = true
				table(table(m, "pods"), "node_selector")["disk"] = 1
				cluster(m, 0)["qps"] = "fast"
				cluster(m, 0)["burst"] = 1.5
				cluster(m, 0)["name"] = 7
			},
			want: []string{
				`clusters[0].burst: must be an integer, not a float`,
				`clusters[0].name: must be a string, not an integer`,
				`clusters[0].qps: must be a number, not a string`,
				`controller.max_request_bytes: must be an integer, not a string`,
				`hub.server: must be a string, not a boolean`,
				`mirror.ttl: must be a string such as "30s", not an integer`,
				`pods.node_selector.disk: must be a string, not an integer`,
			},
		},
		{
			name: "qps out of float32 range",
			edit: func(m map[string]any) { cluster(m, 0)["qps"] = 1e39 },
			want: []string{`clusters[0].qps: out of range`},
		},
		{
			name: "table where a value belongs and the reverse",
			edit: func(m map[string]any) {
				m["controller"] = "crucible"
				table(m, "mirror")["ttl"] = map[string]any{"s": 1}
			},
			want: []string{
				`controller: must be a table, not a string`,
				`mirror.ttl: must be a string such as "30s", not a table`,
				// not "controller.external_url: required": the type error covers it
			},
		},
		{
			name: "clusters not an array of tables",
			raw:  "clusters = 5\n",
			want: []string{
				`clusters: must be an array of tables, not an integer`,
				`controller.external_url: required`,
			},
		},
		{
			name: "cluster element not a table",
			raw:  "default_cluster = \"x\"\nclusters = [1]\n[controller]\nexternal_url = \"https://c.example.com\"\n",
			want: []string{
				`clusters[0]: must be a table, not an integer`,
				`default_cluster "x": no such cluster`,
			},
		},
		{
			name: "inline array of tables",
			raw:  "default_cluster = \"dock\"\nclusters = [{name = \"dock\", server = \"https://d\", ca_file = \"c\", token_file = \"t\", loop_namespace = \"l\", turn_service_account = \"s\", ingest_url = \"https://i\", ingest_audience = \"a\", bogus = 1}]\n[controller]\nexternal_url = \"https://c.example.com\"\n[[nope]]\n",
			want: []string{
				`unknown key clusters[0].bogus`,
				`unknown key nope`,
			},
		},
		// syntax
		{
			name: "syntax error",
			raw:  "[controller\n",
			want: []string{`line 2: expected '.' or ']' to end table name, but got '\n' instead`},
		},
		{
			name: "duplicate key",
			raw:  "default_cluster = \"a\"\ndefault_cluster = \"b\"\n",
			want: []string{`line 2: Key 'default_cluster' has already been defined.`},
		},
		{
			name: "empty file",
			raw:  "",
			want: []string{`controller.external_url: required`, `clusters: at least one cluster is required`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := []byte(tt.raw)
			if tt.raw == "" && tt.edit != nil {
				m := minimal()
				tt.edit(m)
				data = encode(t, m)
			}
			p, err := Parse(data)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Parse: %v\n%s", err, data)
				}
				if err := p.Validate(); err != nil {
					t.Fatalf("Validate after Parse: %v", err)
				}
				return
			}
			if p != nil {
				t.Errorf("Parse returned a profile with an error")
			}
			if !errors.Is(err, ErrInvalidProfile) {
				t.Fatalf("Parse error %v does not wrap ErrInvalidProfile", err)
			}
			perr, ok := errors.AsType[*ProfileError](err)
			if !ok {
				t.Fatalf("Parse error %T is not a *ProfileError", err)
			}
			if diff := cmp.Diff(tt.want, perr.Problems); diff != "" {
				t.Errorf("problems (-want +got):\n%s\ninput:\n%s", diff, data)
			}
		})
	}
}

func TestParseTooLarge(t *testing.T) {
	_, err := Parse(make([]byte, MaxProfileBytes+1))
	if diff := cmp.Diff("invalid profile: larger than 1048576 bytes", errString(err)); diff != "" {
		t.Error(diff)
	}
}

func TestLoadErrorsNameTheFile(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.toml")
	m := minimal()
	delete(cluster(m, 0), "token_file")
	table(m, "controller")["listen"] = "x"
	if err := os.WriteFile(bad, encode(t, m), 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.toml")
	if err := os.WriteFile(big, make([]byte, MaxProfileBytes+10), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path, want string
		invalid    bool
	}{
		{
			path:    bad,
			want:    "invalid profile " + bad + ":\n  unknown key controller.listen\n  clusters[0].token_file: required",
			invalid: true,
		},
		{path: big, want: "invalid profile " + big + ": larger than 1048576 bytes", invalid: true},
		{path: filepath.Join(dir, "missing.toml"), want: "read profile: open " + filepath.Join(dir, "missing.toml") + ": no such file or directory"},
	}
	for _, tt := range tests {
		t.Run(filepath.Base(tt.path), func(t *testing.T) {
			p, err := Load(tt.path)
			if p != nil {
				t.Error("Load returned a profile with an error")
			}
			if diff := cmp.Diff(tt.want, errString(err)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if got := errors.Is(err, ErrInvalidProfile); got != tt.invalid {
				t.Errorf("errors.Is(err, ErrInvalidProfile) = %v, want %v", got, tt.invalid)
			}
		})
	}
}

func TestValidateProgrammaticProfile(t *testing.T) {
	p := wantDefaults()
	if err := p.Validate(); err != nil {
		t.Fatalf("Validate(defaults): %v", err)
	}
	p.Clusters[0].QPS = 0
	p.Controller.Instance = ""
	err := p.Validate()
	want := "invalid profile:\n  controller.instance \"\": must be a DNS label\n  clusters[0].qps \"0\": must be positive"
	if diff := cmp.Diff(want, errString(err)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestCluster(t *testing.T) {
	m := minimal()
	m["clusters"] = append(m["clusters"].([]map[string]any), clusterTree("dock"))
	m["default_cluster"] = "dock"
	p, err := Parse(encode(t, m))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		wantName string
		wantOK   bool
	}{
		{name: "", wantName: "dock", wantOK: true},
		{name: "wharf", wantName: "wharf", wantOK: true},
		{name: "dock", wantName: "dock", wantOK: true},
		{name: "nope"},
		{name: "Wharf"},
	}
	for _, tt := range tests {
		got, ok := p.Cluster(tt.name)
		if ok != tt.wantOK || got.Name != tt.wantName {
			t.Errorf("Cluster(%q) = %q, %v; want %q, %v", tt.name, got.Name, ok, tt.wantName, tt.wantOK)
		}
	}

	single, err := Parse(encode(t, minimal()))
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := single.Cluster(""); !ok || got.Name != "wharf" {
		t.Errorf("single cluster: Cluster(\"\") = %q, %v; want wharf, true", got.Name, ok)
	}
	var empty Profile
	if got, ok := empty.Cluster(""); ok {
		t.Errorf("empty profile: Cluster(\"\") = %q, true; want false", got.Name)
	}
}

func TestDurationText(t *testing.T) {
	var d Duration
	if err := d.UnmarshalText([]byte("1h30m")); err != nil {
		t.Fatal(err)
	}
	if d.Duration != 90*time.Minute {
		t.Errorf("UnmarshalText(1h30m) = %s", d.Duration)
	}
	text, err := d.MarshalText()
	if err != nil || string(text) != "1h30m0s" {
		t.Errorf("MarshalText = %q, %v; want 1h30m0s", text, err)
	}
	if err := d.UnmarshalText([]byte("90")); err == nil {
		t.Error("UnmarshalText(90) succeeded; want an error (no unit)")
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

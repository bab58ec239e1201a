package fleet

import (
	"fmt"
	"time"
)

// Defaults of the profile, applied by Parse to every key that is unset or
// zero. docs/config.md lists them; keep the two in step.
const (
	DefaultInstance        = "crucible"
	DefaultInternalListen  = "127.0.0.1:8080"
	DefaultExternalListen  = "127.0.0.1:8443"
	DefaultStore           = "sqlite:crucible.db"
	DefaultArtifactsDir    = "artifacts"
	DefaultMaxRequestBytes = 1 << 20

	DefaultMirrorTTL      = 30 * time.Second
	DefaultMirrorMaxStale = 10 * time.Minute

	DefaultSweepInterval  = time.Minute
	DefaultOrphanGrace    = 10 * time.Minute
	DefaultRetryBudget    = 2 * time.Minute
	DefaultMaxBackoff     = 10 * time.Second
	DefaultHealthInterval = 15 * time.Second

	DefaultIngestTokenExpiration = time.Hour
	// MinIngestTokenExpiration is the kubelet's lower bound for a projected
	// service-account token's expirationSeconds.
	MinIngestTokenExpiration = 10 * time.Minute
	// MaxIngestTokenExpiration is the API server's upper bound (2^32 s).
	MaxIngestTokenExpiration = (1 << 32) * time.Second

	// Drop-box defaults: 64 MiB artifacts; accepts remembered up to 5m,
	// rejections 10s; 20 requests/s per source with a burst of 40.
	DefaultIngestMaxBodyBytes  = 64 << 20
	DefaultIngestAcceptTTL     = 5 * time.Minute
	DefaultIngestNegativeTTL   = 10 * time.Second
	DefaultIngestCacheSize     = 10000
	DefaultIngestRatePerSource = 20
	DefaultIngestRateBurst     = 40

	// DefaultQPS and DefaultBurst replace client-go's 5 and 10, which would
	// throttle dispatch (three requests per work pod) to under two pods a
	// second. At 500 the client limiter stays above what one spoke API server
	// takes (~185 pod sets/s measured here), so the server's own priority and
	// fairness, not a guess in the client, sets the pace.
	DefaultQPS   = 500
	DefaultBurst = 1000
)

// Duration is a time.Duration written in TOML as a string such as "30s" or
// "1h30m" (time.ParseDuration).
type Duration struct{ time.Duration }

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(text []byte) error {
	v, err := time.ParseDuration(string(text))
	if err != nil {
		return fmt.Errorf("not a duration (want e.g. \"30s\", \"10m\", \"1h\")")
	}
	d.Duration = v
	return nil
}

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// Profile is the controller's configuration file. Build one with Load or
// Parse, which apply the defaults and validate it.
type Profile struct {
	Controller Controller `toml:"controller"`
	Hub        Hub        `toml:"hub"`
	Mirror     Mirror     `toml:"mirror"`
	Reconcile  Reconcile  `toml:"reconcile"`
	Pods       Pods       `toml:"pods"`
	Ingest     Ingest     `toml:"ingest"`
	// DefaultCluster is the cluster a request without a target goes to.
	// Required with more than one cluster; defaults to the only one.
	DefaultCluster string `toml:"default_cluster"`
	// Clusters are the spokes, in the order the API lists them.
	Clusters []ClusterEntry `toml:"clusters"`
}

// Controller is the controller process: its listeners, store and limits.
type Controller struct {
	// Instance is the value of the origin label on every object the
	// controller creates; two controllers sharing a spoke need different
	// instances. A DNS label.
	Instance string `toml:"instance"`
	// InternalListen serves the API, UI, /healthz, /readyz and /metrics.
	InternalListen  string `toml:"internal_listen"`
	InternalTLSCert string `toml:"internal_tls_cert"`
	InternalTLSKey  string `toml:"internal_tls_key"`
	// ExternalListen serves only the drop-box and the discovery mirror.
	ExternalListen string `toml:"external_listen"`
	// ExternalURL is the external listener's base URL as spokes reach it.
	ExternalURL     string `toml:"external_url"`
	ExternalTLSCert string `toml:"external_tls_cert"`
	ExternalTLSKey  string `toml:"external_tls_key"`
	// Store is the database DSN: "sqlite:<path>" or a postgres:// URL.
	Store string `toml:"store"`
	// ArtifactsDir holds uploaded and collected artifacts.
	ArtifactsDir string `toml:"artifacts_dir"`
	// MaxRequestBytes limits API request bodies.
	MaxRequestBytes int64 `toml:"max_request_bytes"`
}

// Hub is how the controller reaches its own cluster's API (for the
// discovery mirror and leader election). Server "" means in-cluster.
type Hub struct {
	Server    string `toml:"server"`
	CAFile    string `toml:"ca_file"`
	TokenFile string `toml:"token_file"`
}

// Mirror tunes the OIDC discovery mirror.
type Mirror struct {
	TTL      Duration `toml:"ttl"`
	MaxStale Duration `toml:"max_stale"`
}

// Reconcile tunes the loops that watch, sweep and probe the spokes.
type Reconcile struct {
	SweepInterval  Duration `toml:"sweep_interval"`
	OrphanGrace    Duration `toml:"orphan_grace"`
	RetryBudget    Duration `toml:"retry_budget"`
	MaxBackoff     Duration `toml:"max_backoff"`
	HealthInterval Duration `toml:"health_interval"`
}

// Ingest tunes the drop-box on the external listener, the most exposed
// thing crucible has.
type Ingest struct {
	// MaxBodyBytes bounds one uploaded artifact.
	MaxBodyBytes int64 `toml:"max_body_bytes"`
	// AcceptTTL bounds how long an accepted token is remembered (never past
	// its own exp); NegativeTTL how long a rejected one is.
	AcceptTTL   Duration `toml:"accept_ttl"`
	NegativeTTL Duration `toml:"negative_ttl"`
	// CacheSize bounds each cache and the per-source limiter map.
	CacheSize int `toml:"cache_size"`
	// RatePerSource and RateBurst limit requests per client address.
	RatePerSource float32 `toml:"rate_per_source"`
	RateBurst     int     `toml:"rate_burst"`
	// TrustedProxies are CIDRs whose X-Forwarded-For is believed.
	TrustedProxies []string `toml:"trusted_proxies"`
}

// Pods shapes every work pod the controller renders.
type Pods struct {
	// IngestTokenExpiration is the lifetime of the projected token a work
	// pod presents to the drop-box; the kubelet rotates it at 80 %.
	IngestTokenExpiration Duration          `toml:"ingest_token_expiration"`
	NodeSelector          map[string]string `toml:"node_selector"`
	// ImagePullPolicy is "", Always, IfNotPresent or Never; "" leaves it to
	// the spoke's API server.
	ImagePullPolicy string `toml:"image_pull_policy"`
	// PushImage is crucible's own image. When set, every work pod gets an
	// init container from it that copies the crucible binary into the pod,
	// so `crucible push` works in any image (as Tekton and Argo inject
	// their entrypoints). Empty: off.
	PushImage string `toml:"push_image"`
}

// ClusterEntry is one spoke.
type ClusterEntry struct {
	// Name identifies the cluster in the store, the API and metrics.
	Name string `toml:"name"`
	// Server is the spoke API's https URL.
	Server string `toml:"server"`
	// CAFile verifies the spoke API's serving certificate.
	CAFile string `toml:"ca_file"`
	// TokenFile is the controller's projected service-account token whose
	// audience is this spoke. It is re-read as it rotates.
	TokenFile string `toml:"token_file"`
	// LoopNamespace is where work pods run on the spoke.
	LoopNamespace string `toml:"loop_namespace"`
	// TurnServiceAccount is the service account work pods run as; their
	// ingest tokens name it.
	TurnServiceAccount string `toml:"turn_service_account"`
	// IngestURL is the drop-box's base URL as pods on this spoke reach it,
	// projected into pods as CRUCIBLE_INGEST_URL.
	IngestURL string `toml:"ingest_url"`
	// IngestAudience is the audience of the pods' projected ingest token.
	IngestAudience string `toml:"ingest_audience"`
	// QPS and Burst are client-go's client-side rate limit for this spoke.
	QPS   float32 `toml:"qps"`
	Burst int     `toml:"burst"`
}

// Cluster returns the entry called name; "" means the default cluster.
func (p *Profile) Cluster(name string) (ClusterEntry, bool) {
	if name == "" {
		name = p.DefaultCluster
	}
	for _, c := range p.Clusters {
		if c.Name == name && name != "" {
			return c, true
		}
	}
	return ClusterEntry{}, false
}

// applyDefaults fills every unset or zero key that has a default. It is the
// one place defaults live.
func (p *Profile) applyDefaults() {
	c := &p.Controller
	setString(&c.Instance, DefaultInstance)
	setString(&c.InternalListen, DefaultInternalListen)
	setString(&c.ExternalListen, DefaultExternalListen)
	setString(&c.Store, DefaultStore)
	setString(&c.ArtifactsDir, DefaultArtifactsDir)
	if c.MaxRequestBytes == 0 {
		c.MaxRequestBytes = DefaultMaxRequestBytes
	}

	setDuration(&p.Mirror.TTL, DefaultMirrorTTL)
	setDuration(&p.Mirror.MaxStale, DefaultMirrorMaxStale)

	r := &p.Reconcile
	setDuration(&r.SweepInterval, DefaultSweepInterval)
	setDuration(&r.OrphanGrace, DefaultOrphanGrace)
	setDuration(&r.RetryBudget, DefaultRetryBudget)
	setDuration(&r.MaxBackoff, DefaultMaxBackoff)
	setDuration(&r.HealthInterval, DefaultHealthInterval)

	setDuration(&p.Pods.IngestTokenExpiration, DefaultIngestTokenExpiration)

	in := &p.Ingest
	if in.MaxBodyBytes == 0 {
		in.MaxBodyBytes = DefaultIngestMaxBodyBytes
	}
	setDuration(&in.AcceptTTL, DefaultIngestAcceptTTL)
	setDuration(&in.NegativeTTL, DefaultIngestNegativeTTL)
	if in.CacheSize == 0 {
		in.CacheSize = DefaultIngestCacheSize
	}
	if in.RatePerSource == 0 {
		in.RatePerSource = DefaultIngestRatePerSource
	}
	if in.RateBurst == 0 {
		in.RateBurst = DefaultIngestRateBurst
	}

	for i := range p.Clusters {
		e := &p.Clusters[i]
		if e.QPS == 0 {
			e.QPS = DefaultQPS
		}
		if e.Burst == 0 {
			e.Burst = DefaultBurst
		}
	}
	if p.DefaultCluster == "" && len(p.Clusters) == 1 {
		p.DefaultCluster = p.Clusters[0].Name
	}
}

func setString(s *string, def string) {
	if *s == "" {
		*s = def
	}
}

func setDuration(d *Duration, def time.Duration) {
	if d.Duration == 0 {
		d.Duration = def
	}
}

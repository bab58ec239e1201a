package profile

import (
	"fmt"
	"time"
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
	API        API        `toml:"api"`
	Live       Live       `toml:"live"`
	Events     Events     `toml:"events"`
	RunLive    RunLive    `toml:"run_live"`
	// LeaderElection tunes the Lease of [controller] leader_elect.
	LeaderElection LeaderElection `toml:"leader_election"`
	// DefaultCluster is the cluster a request without a target goes to, or
	// AutoCluster: placement picks the spoke. Required with more than one
	// cluster; defaults to the only one.
	DefaultCluster string `toml:"default_cluster"`
	// Clusters are the spokes, in the order the API lists them.
	Clusters []ClusterEntry `toml:"clusters"`
	// Fleet adds the spokes a cluster manager publishes as ClusterProfiles
	// on the hub (package inventory) to Clusters.
	Fleet Fleet `toml:"fleet"`
}

// Fleet is where spokes come from besides [[clusters]]: the ClusterProfiles
// (KEP-4322) of one hub namespace that list crucible's access provider.
// Whoever may write ClusterProfiles there chooses, for each spoke it makes,
// the server that receives the controller's tokens of that spoke's
// audience; ServerPins takes that choice back.
type Fleet struct {
	// ClusterProfiles is the hub namespace whose ClusterProfiles become
	// spokes; empty: none do.
	ClusterProfiles string `toml:"cluster_profiles"`
	// Selector narrows them by label (a label selector, "a=b,c").
	Selector string `toml:"cluster_profile_selector"`
	// AccessProvider is the status.accessProviders entry that makes a
	// ClusterProfile a spoke: its server and CA are the spoke's.
	AccessProvider string `toml:"access_provider"`
	// ServerPins is a pins file (`crucible render clusterprofile
	// --server-pins`): with it, a ClusterProfile becomes a spoke only if
	// its server and CA are those pinned for its name.
	ServerPins string `toml:"server_pins"`
	// ClusterDefaults are every such spoke's other keys (loop namespace,
	// service account, ingest URL, limits), as in a [[clusters]] entry; a
	// ClusterProfile's properties crucible.dev/loop-namespace and
	// crucible.dev/turn-service-account override the first two.
	ClusterDefaults ClusterEntry `toml:"cluster_defaults"`
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
	// MetricsListen serves /metrics alone (plain HTTP); "off" disables it.
	MetricsListen string `toml:"metrics_listen"`
	// MetricsAllowedHosts are the Host names (any port) the metrics and
	// pprof listeners answer besides IP literals, which defeats DNS
	// rebinding from a browser on the same machine; a scraper addressing
	// the pod by IP is not affected.
	MetricsAllowedHosts []string `toml:"metrics_allowed_hosts"`
	// LeaderElect lets several replicas share one PostgreSQL store: all
	// serve the API, the drop-box and the mirror; only the holder of the
	// [leader_election] Lease runs the reconcile loops (R-C10).
	LeaderElect bool `toml:"leader_elect"`
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
	// RetryInitial is the first backoff of a retried operation; it doubles
	// up to MaxBackoff.
	RetryInitial Duration `toml:"retry_initial"`
	// Workers is how many rows of one cluster are synced at a time; each
	// cluster has workers of its own.
	Workers int `toml:"workers"`
	// SweepPage is how many pods one list request of the sweep returns:
	// the sweep holds one page of full pods at a time.
	SweepPage int64 `toml:"sweep_page"`
	// DrainTimeout bounds how long a cluster removed from the profile is
	// followed: its live rows go on to their end meanwhile, and those still
	// live after it are marked lost.
	DrainTimeout Duration `toml:"drain_timeout"`
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
	// RatePerSource and RateBurst limit requests per client address (an
	// IPv6 /64); a request that authenticates is not charged.
	RatePerSource float32 `toml:"rate_per_source"`
	RateBurst     int     `toml:"rate_burst"`
	// RatePerPod and RateBurstPerPod limit authenticated requests per pod.
	RatePerPod      float32 `toml:"rate_per_pod"`
	RateBurstPerPod int     `toml:"rate_burst_per_pod"`
	// TrustedProxies are CIDRs whose X-Forwarded-For is believed.
	TrustedProxies []string `toml:"trusted_proxies"`

	// Upload quotas and pacing (R-IN7): per pod at most MaxKindsPerPod
	// artifacts of MaxBytesPerPod in total and MaxStagingPerPod uploads
	// being written at once; MinFreeBytes kept free on the artifact volume;
	// a body slower than MinUploadRate bytes/s over UploadRateWindow is cut.
	MaxKindsPerPod int   `toml:"max_kinds_per_pod"`
	MaxBytesPerPod int64 `toml:"max_bytes_per_pod"`
	MinFreeBytes   int64 `toml:"min_free_bytes"`
	MaxTotalBytes  int64 `toml:"max_total_bytes"`
	// MaxBytesPerSubmitter and MaxBytesPerCluster bound the artifacts of
	// every pod of one submitter, and of one cluster, beside MaxTotalBytes.
	MaxBytesPerSubmitter int64    `toml:"max_bytes_per_submitter"`
	MaxBytesPerCluster   int64    `toml:"max_bytes_per_cluster"`
	MaxStagingPerPod     int      `toml:"max_staging_per_pod"`
	MinUploadRate        int64    `toml:"min_upload_rate"`
	UploadRateWindow     Duration `toml:"upload_rate_window"`
}

// API is who may call the internal listener's API and how it answers.
type API struct {
	// Auth is none (loopback only), kubernetes (hub bearer tokens) or proxy
	// (a trusted SSO proxy's headers).
	Auth string `toml:"auth"`
	// Namespace is the hub namespace of the SubjectAccessReviews: a
	// RoleBinding there, or a ClusterRoleBinding, grants access.
	Namespace string `toml:"namespace"`
	// ProxyCIDRs are the proxy's addresses (TCP peer); only they may send
	// the identity headers. Required with auth "proxy".
	ProxyCIDRs        []string `toml:"proxy_cidrs"`
	ProxyUserHeader   string   `toml:"proxy_user_header"`
	ProxyGroupsHeader string   `toml:"proxy_groups_header"`
	// AllowedHosts are the Host header names (any port) the API answers;
	// anything else is refused, which defeats DNS rebinding.
	AllowedHosts []string `toml:"allowed_hosts"`
	// How long hub answers are remembered, accepts and denials apart, and
	// how many of each.
	TokenAcceptTTL   Duration `toml:"token_accept_ttl"`
	TokenNegativeTTL Duration `toml:"token_negative_ttl"`
	AccessAllowTTL   Duration `toml:"access_allow_ttl"`
	AccessDenyTTL    Duration `toml:"access_deny_ttl"`
	CacheSize        int      `toml:"cache_size"`
	// PageSize is GET /api/pods's page without ?limit.
	PageSize int `toml:"page_size"`
	// ProxyClientCA, with auth "proxy", makes the internal listener
	// require a client certificate signed by this CA from every peer in
	// proxy_cidrs before their identity headers count: an address alone
	// is what every pod of a pod CIDR has.
	ProxyClientCA string `toml:"proxy_client_ca"`
	// ProxyClientNames, with proxy_client_ca, pins the proxy: its client
	// certificate's CN or a DNS SAN must be one of these, or the handshake
	// fails (as the webhook's client_names). A CA that signs for a whole
	// mesh otherwise makes every pod of it a proxy.
	ProxyClientNames []string `toml:"proxy_client_names"`
	// AuthFailuresPerSource and AuthFailureBurst bound the failed
	// authentications one client address (an IPv6 /64) may cause: past
	// them its requests get 429 without a TokenReview, so garbage
	// bearers cannot spend the hub's TokenReview budget.
	AuthFailuresPerSource float32 `toml:"auth_failures_per_source"`
	AuthFailureBurst      int     `toml:"auth_failure_burst"`
	// TokenReviewQPS/Burst and AccessReviewQPS/Burst are the client-side
	// rate limits of the hub's TokenReviews and SubjectAccessReviews,
	// apart, so a flood of one never starves the other.
	TokenReviewQPS    float32 `toml:"token_review_qps"`
	TokenReviewBurst  int     `toml:"token_review_burst"`
	AccessReviewQPS   float32 `toml:"access_review_qps"`
	AccessReviewBurst int     `toml:"access_review_burst"`
	// StreamRecheck is how often a long-lived stream (live logs, events)
	// checks again that its caller still is who it was and may still
	// read it; a stream whose caller's token expired or whose binding was
	// revoked ends with an error event.
	StreamRecheck Duration `toml:"stream_recheck"`
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
	// MaxLogBytes bounds the log the controller pulls from a finished pod
	// (tier 1); larger output belongs in the drop-box.
	MaxLogBytes int64 `toml:"max_log_bytes"`
	// MetadataPrefixes are the label and annotation key prefixes a
	// submitter may put on a work pod (e.g. "example.com/"), besides
	// crucible's own; anything else is refused, so that no submitter can
	// set a key the spoke's admission or tooling acts on.
	MetadataPrefixes []string `toml:"metadata_prefixes"`
	// Classes are the pod classes (R-P1): what a work pod asks of the
	// spoke. A profile without any gets defaultClass for both kinds.
	Classes []PodClass `toml:"classes"`
}

// Live tunes the live log (GET /api/pods/{pod}/logs as text/event-stream):
// one upstream stream per pod, shared by its viewers.
type Live struct {
	// History is how many recent lines a stream keeps for viewers joining
	// late; older lines are only in the collected log.
	History int `toml:"history"`
	// HistoryBytes bounds the same history in bytes: a pod printing long
	// lines must not make its stream hold History of them.
	HistoryBytes int64 `toml:"history_bytes"`
	// Buffer is how many lines a viewer may fall behind before it is
	// dropped, so that a slow viewer never holds the others back.
	Buffer int `toml:"buffer"`
	// ViewerBufferBytes bounds the same queue in bytes.
	ViewerBufferBytes int64 `toml:"viewer_buffer_bytes"`
	// ReadBytesPerSecond paces the one upstream read of a pod's log: a pod
	// flooding its log is read no faster than this, the spoke held back by
	// flow control, instead of the controller pulling everything the spoke
	// can send to drop most of it at viewers far slower. The collected log
	// is read whole at the pod's end, not from this stream.
	ReadBytesPerSecond int64 `toml:"read_bytes_per_second"`
	// WriteTimeout bounds one write and flush to an SSE client: one that
	// stops reading is cut then and frees what it held, instead of
	// blocking its handler and pinning its queue for as long as it likes.
	WriteTimeout Duration `toml:"write_timeout"`
	// MaxViewers caps the live-log streams open at once in all, and
	// MaxViewersPerIdentity those of one caller: past either, 429.
	MaxViewers            int `toml:"max_viewers"`
	MaxViewersPerIdentity int `toml:"max_viewers_per_identity"`
	// PollInterval is how often a pending pod's start, and a followed
	// pod's end, are checked on its spoke.
	PollInterval Duration `toml:"poll_interval"`
}

// Events tunes GET /api/events, the feed of row changes behind the web
// UI's live rows and `crucible pods list --watch`.
type Events struct {
	// History and HistoryBytes bound the recent changes a reconnecting
	// subscriber can resume from, in changes and in bytes.
	History      int   `toml:"history"`
	HistoryBytes int64 `toml:"history_bytes"`
	// Queue and QueueBytes bound what one subscriber may fall behind
	// before it is dropped (it reconnects and resumes or re-lists).
	Queue      int   `toml:"queue"`
	QueueBytes int64 `toml:"queue_bytes"`
	// MaxStreams caps the event streams open at once in all, and
	// MaxStreamsPerIdentity those of one caller: past either, 429.
	MaxStreams            int `toml:"max_streams"`
	MaxStreamsPerIdentity int `toml:"max_streams_per_identity"`
}

// RunLive bounds the port-forward sessions the controller relays to work
// pods on spokes whose entry says run_live.
type RunLive struct {
	// MaxSessions caps the sessions open at once in all, and
	// MaxSessionsPerIdentity those of one caller: past either, 429.
	MaxSessions            int `toml:"max_sessions"`
	MaxSessionsPerIdentity int `toml:"max_sessions_per_identity"`
	// IdleTimeout ends a session that carried no byte either way for so
	// long; WriteTimeout bounds one write to either side.
	IdleTimeout  Duration `toml:"idle_timeout"`
	WriteTimeout Duration `toml:"write_timeout"`
	// MaxSession ends a session this long after it opened, busy or not:
	// a forgotten tunnel into a pod does not stay open for ever.
	MaxSession Duration `toml:"max_session"`
	// OpensPerMinute is how many sessions one caller may open a minute
	// (each costs the spoke a dial), with as many at once: past it, 429.
	OpensPerMinute int `toml:"opens_per_minute"`
}

// ClusterEntry is one spoke.
type ClusterEntry struct {
	// Name identifies the cluster in the store, the API and metrics.
	Name string `toml:"name"`
	// Server is the spoke API's https URL.
	Server string `toml:"server"`
	// CAFile verifies the spoke API's serving certificate.
	CAFile string `toml:"ca_file"`
	// CAData is the PEM bundle a ClusterProfile brings instead of CAFile;
	// never read from the file.
	CAData []byte `toml:"-"`
	// TokenSource is where the controller's token for this spoke comes
	// from: TokenSourceFile (TokenFile) or TokenSourceRequest (the hub's
	// TokenRequest API, for a spoke added to a running controller, whose pod
	// cannot gain a projected volume).
	TokenSource string `toml:"token_source"`
	// TokenFile is the controller's projected service-account token whose
	// audience is this spoke. It is re-read as it rotates. Only with
	// TokenSourceFile.
	TokenFile string `toml:"token_file"`
	// TokenAudience is the audience of the tokens asked for with
	// TokenSourceRequest (default: Name), the audience the spoke's authn
	// webhook accepts; a token file's audience is its projected volume's.
	TokenAudience string `toml:"token_audience"`
	// TokenExpiration is the lifetime asked for with TokenSourceRequest;
	// the token is renewed at 80 % of the lifetime the hub granted.
	TokenExpiration Duration `toml:"token_expiration"`
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
	// RunLive lets callers port-forward to this spoke's work pods through
	// the controller (GET /api/pods/{pod}/portforward): `render spoke`
	// then grants pods/portforward create in the loop namespace, and
	// nothing without it.
	RunLive bool `toml:"run_live"`
	// RunLivePort is the port `crucible run-live` forwards to.
	RunLivePort int `toml:"run_live_port"`
	// RunLivePorts are the pod ports that may be forwarded at all.
	RunLivePorts []int `toml:"run_live_ports"`
	// Classes adjusts pod classes for this spoke, by class name: its own
	// GPU resource name or taints, or the class withheld here.
	Classes map[string]ClassAdjust `toml:"classes"`
	// Capacity makes the controller watch this spoke's nodes and its bound,
	// non-terminal pods, so that placement knows where a pod fits now. It
	// costs one watch of each (per pod only its node and summed requests
	// are kept) and needs nodes get/list/watch and pods list/watch across
	// the whole spoke, which `render spoke` and the spoke chart's
	// capacity.enabled grant, and nothing without it: that identity can
	// then read every pod's spec on the spoke.
	Capacity bool `toml:"capacity"`
}

// AutoCluster is the cluster name that asks placement to pick the spoke
// (R-PL1); no cluster may be called so.
const AutoCluster = "auto"

// Cluster returns the entry called name; "" means the default cluster.
// AutoCluster is no entry: with default_cluster "auto", "" finds none and
// the caller places the pod.
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

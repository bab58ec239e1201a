package profile

import "time"

// Defaults of the profile, applied by setDefaults to every key that is unset
// or zero. docs/config.md lists them; keep the two in step.
const (
	DefaultInstance        = "crucible"
	DefaultInternalListen  = "127.0.0.1:8080"
	DefaultExternalListen  = "127.0.0.1:8443"
	DefaultStore           = "sqlite:crucible.db"
	DefaultArtifactsDir    = "artifacts"
	DefaultMaxRequestBytes = 1 << 20

	// DefaultMirrorTTL is short because consumers honour Cache-Control: the
	// TTL bounds how long a rotated hub key takes to reach the spokes.
	DefaultMirrorTTL = 30 * time.Second
	// DefaultMirrorMaxStale lets the spokes ride out a hub API outage of this
	// length before token validation stops.
	DefaultMirrorMaxStale = 10 * time.Minute

	DefaultSweepInterval  = time.Minute
	DefaultOrphanGrace    = 10 * time.Minute
	DefaultRetryBudget    = 2 * time.Minute
	DefaultMaxBackoff     = 10 * time.Second
	DefaultRetryInitial   = 200 * time.Millisecond
	DefaultHealthInterval = 15 * time.Second
	// DefaultWorkers syncs four rows of a cluster at once: enough that one
	// slow log collection does not stall the cluster's other rows.
	DefaultWorkers = 4
	// DefaultSweepPage keeps the sweep's memory to one page of full pods,
	// never a cluster's 50,000 (hundreds of MiB decoded).
	DefaultSweepPage = 500
	// DefaultDrainTimeout follows a removed cluster's pods for ten
	// minutes: a turn is minutes long, a training run is not drained but
	// cancelled or left on a cluster that stays.
	DefaultDrainTimeout = 10 * time.Minute

	DefaultIngestTokenExpiration = time.Hour
	// DefaultMaxLogBytes bounds a pulled log at 64 MiB, also what a
	// collecting worker may stream into one artifact.
	DefaultMaxLogBytes = 64 << 20
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
	DefaultIngestRatePerPod    = 10
	DefaultIngestRateBurstPod  = 20

	// Upload quotas and pacing (R-IN7): 32 kinds and 1 GiB per pod, 1 GiB
	// kept free on the artifact volume, 2 uploads of a pod staged at once,
	// at least 4 KiB/s over every 30 s.
	DefaultIngestMaxKindsPerPod = 32
	DefaultIngestMaxBytesPerPod = 1 << 30
	DefaultIngestMinFreeBytes   = 1 << 30
	DefaultIngestMaxTotalBytes  = 100 << 30
	// A quarter of the total per submitter and half per cluster: one tenant
	// or one spoke cannot fill the total for all.
	DefaultIngestMaxBytesPerSubmitter = 25 << 30
	DefaultIngestMaxBytesPerCluster   = 50 << 30
	DefaultIngestMaxStagingPerPod     = 2
	DefaultIngestMinUploadRate        = 4 << 10
	DefaultIngestUploadRateWindow     = 30 * time.Second

	// DefaultTokenSource keeps a spoke's token in the projected file the
	// kubelet rotates; DefaultTokenExpiration is the lifetime asked of the
	// hub's TokenRequest API otherwise, within TokenRequest's minimum
	// (10m) and a day, past which a leaked token is worth too much.
	DefaultTokenSource     = TokenSourceFile
	DefaultTokenExpiration = time.Hour
	MinTokenExpiration     = 10 * time.Minute
	MaxTokenExpiration     = 24 * time.Hour

	// DefaultQPS and DefaultBurst replace client-go's 5 and 10, which would
	// throttle dispatch (three requests per work pod) to under two pods a
	// second. At 500 the client limiter stays above what one spoke API server
	// takes (~185 pod sets/s measured here), so the server's own priority and
	// fairness, not a guess in the client, sets the pace.
	DefaultQPS   = 500
	DefaultBurst = 1000
)

// API defaults: no authentication (so loopback only); hub reviews cached
// briefly (a revoked binding bites within seconds); pages of 500 rows.
const (
	DefaultAPIAuth              = AuthNone
	DefaultAPINamespace         = "crucible"
	DefaultAPIProxyUserHeader   = "X-Auth-Request-User"
	DefaultAPIProxyGroupsHeader = "X-Auth-Request-Groups"
	DefaultAPITokenAcceptTTL    = 10 * time.Second
	DefaultAPITokenNegativeTTL  = 5 * time.Second
	DefaultAPIAccessAllowTTL    = 10 * time.Second
	DefaultAPIAccessDenyTTL     = 5 * time.Second
	DefaultAPICacheSize         = 10000
	DefaultAPIPageSize          = 500
	// A client address may fail authentication once a second with a
	// burst of 20: a mistyped token is retried a few times, a flood of
	// garbage gets 429 without costing the hub a TokenReview.
	DefaultAPIAuthFailuresPerSource = 1
	DefaultAPIAuthFailureBurst      = 20
	DefaultAPITokenReviewQPS        = 50
	DefaultAPITokenReviewBurst      = 100
	DefaultAPIAccessReviewQPS       = 50
	DefaultAPIAccessReviewBurst     = 100
	DefaultAPIStreamRecheck         = time.Minute
	// MaxAPIPageSize bounds one page of GET /api/pods, whatever ?limit asks.
	MaxAPIPageSize = 10000
	// DefaultMetricsListen serves /metrics on its own loopback listener;
	// MetricsListenOff turns it off.
	DefaultMetricsListen = "127.0.0.1:9090"
	MetricsListenOff     = "off"
)

// Live log defaults: a late viewer gets the last 10000 lines or 4 MiB,
// whichever is less; a viewer 1024 lines or 1 MiB behind is dropped (it
// reconnects with Last-Event-ID); a write to a viewer that does not finish
// within 10s cuts it; and a pending or followed pod is checked once a
// second. A pod printing 64 KiB lines thus costs a stream 4 MiB and each of
// its viewers 1 MiB, where counts alone let it cost 1.3 GiB. The viewer caps
// leave room for the 500 viewers of one identity that make bench measures.
// A pod's log is read upstream at up to 1 MiB/s, about ten thousand
// 100-byte lines a second: more than anyone reads, and what bounds a
// flooding pod's cost to the spoke and to everyone else's viewers.
const (
	DefaultLiveHistory               = 10000
	DefaultLiveHistoryBytes          = 4 << 20
	DefaultLiveBuffer                = 1024
	DefaultLiveViewerBufferBytes     = 1 << 20
	DefaultLiveReadBytesPerSecond    = 1 << 20
	DefaultLiveWriteTimeout          = 10 * time.Second
	DefaultLiveMaxViewers            = 1000
	DefaultLiveMaxViewersPerIdentity = 500
	DefaultLivePollInterval          = time.Second
)

// Event feed defaults: a reconnecting subscriber resumes from the last 1024
// changes or 4 MiB; one 1024 changes or 1 MiB behind is dropped; 1000
// streams in all, 100 per caller (a browser tab holds one).
const (
	DefaultEventsHistory               = 1024
	DefaultEventsHistoryBytes          = 4 << 20
	DefaultEventsQueue                 = 1024
	DefaultEventsQueueBytes            = 1 << 20
	DefaultEventsMaxStreams            = 1000
	DefaultEventsMaxStreamsPerIdentity = 100
)

// Run-live defaults: the port crucible's own tooling serves a live view on;
// 1000 sessions in all and 100 per caller (a browser page or a CLI opens
// one per connection); a session idle for 30 minutes ends, as does one
// whose peer does not take a write within 10 s, and any after 12 hours; a
// caller opens at most 60 a minute.
const (
	DefaultRunLivePort                   = 7777
	DefaultRunLiveMaxSessions            = 1000
	DefaultRunLiveMaxSessionsPerIdentity = 100
	DefaultRunLiveIdleTimeout            = 30 * time.Minute
	DefaultRunLiveWriteTimeout           = 10 * time.Second
	DefaultRunLiveMaxSession             = 12 * time.Hour
	DefaultRunLiveOpensPerMinute         = 60
)

// The values of [[clusters]] token_source.
const (
	TokenSourceFile    = "file"
	TokenSourceRequest = "request"
)

// The values of [api] auth.
const (
	AuthNone       = "none"
	AuthKubernetes = "kubernetes"
	AuthProxy      = "proxy"
)

// DefaultAPIAllowedHosts are the Host names the API answers by default.
func DefaultAPIAllowedHosts() []string { return []string{"localhost", "127.0.0.1", "::1"} }

// DefaultMetricsAllowedHosts are the host names the metrics and pprof
// listeners answer by default (IP literals are always answered).
func DefaultMetricsAllowedHosts() []string { return []string{"localhost"} }

// Leader election defaults (R-C10): controller-runtime's and
// kube-controller-manager's durations. A replica that dies is replaced as
// leader within LeaseDuration; a leader cut off from the hub stops its loops
// within RenewDeadline, before anyone else may take over. The lease's name
// defaults to controller.instance + DefaultLeaseNameSuffix, so the replicas
// of one deployment (one instance) share one lease.
const (
	DefaultLeaseNameSuffix = "-leader"
	DefaultLeaseNamespace  = "crucible"
	DefaultLeaseDuration   = 15 * time.Second
	DefaultRenewDeadline   = 10 * time.Second
	DefaultRetryPeriod     = 2 * time.Second
)

// Default is the profile of an empty file with every default applied: the
// sections consumers take, for callers (tests above all) that build a part
// without a profile file. It is not a valid profile: it has no clusters and
// no external URL.
func Default() Profile {
	var p Profile
	setDefaults(&p)
	return p
}

// setDefaults fills every key of p that is unset or zero and has a default.
// It is the one place defaults are applied (kueue's SetDefaults_Configuration
// is the model): Parse calls it exactly once, before validation, so no other
// package needs a fallback for a zero profile value; consumers take the
// defaulted section and refuse a zero value. Keys whose default depends on
// another key (the lease name, the default cluster) are filled after that
// key's own default.
func setDefaults(p *Profile) {
	c := &p.Controller
	setZero(&c.Instance, DefaultInstance)
	setZero(&c.InternalListen, DefaultInternalListen)
	setZero(&c.ExternalListen, DefaultExternalListen)
	setZero(&c.Store, DefaultStore)
	setZero(&c.ArtifactsDir, DefaultArtifactsDir)
	setZero(&c.MaxRequestBytes, DefaultMaxRequestBytes)
	setZero(&c.MetricsListen, DefaultMetricsListen)
	if len(c.MetricsAllowedHosts) == 0 {
		c.MetricsAllowedHosts = DefaultMetricsAllowedHosts()
	}

	setZero(&p.Mirror.TTL.Duration, DefaultMirrorTTL)
	setZero(&p.Mirror.MaxStale.Duration, DefaultMirrorMaxStale)

	r := &p.Reconcile
	setZero(&r.SweepInterval.Duration, DefaultSweepInterval)
	setZero(&r.OrphanGrace.Duration, DefaultOrphanGrace)
	setZero(&r.RetryBudget.Duration, DefaultRetryBudget)
	setZero(&r.MaxBackoff.Duration, DefaultMaxBackoff)
	setZero(&r.RetryInitial.Duration, DefaultRetryInitial)
	setZero(&r.HealthInterval.Duration, DefaultHealthInterval)
	setZero(&r.Workers, DefaultWorkers)
	setZero(&r.SweepPage, DefaultSweepPage)
	setZero(&r.DrainTimeout.Duration, DefaultDrainTimeout)

	setZero(&p.Pods.IngestTokenExpiration.Duration, DefaultIngestTokenExpiration)
	setZero(&p.Pods.MaxLogBytes, DefaultMaxLogBytes)

	setIngestDefaults(&p.Ingest)

	setAPIDefaults(&p.API)
	setStreamDefaults(p)

	l := &p.LeaderElection
	setZero(&l.LeaseName, c.Instance+DefaultLeaseNameSuffix) // after the instance's default
	setZero(&l.LeaseNamespace, DefaultLeaseNamespace)
	setZero(&l.LeaseDuration.Duration, DefaultLeaseDuration)
	setZero(&l.RenewDeadline.Duration, DefaultRenewDeadline)
	setZero(&l.RetryPeriod.Duration, DefaultRetryPeriod)

	setClassDefaults(&p.Pods)
	setClusterDefaults(p.Clusters)
	setFleetDefaults(&p.Fleet)
	if p.DefaultCluster == "" && len(p.Clusters) == 1 {
		p.DefaultCluster = p.Clusters[0].Name
	}
}

// setAPIDefaults fills the API's listener, auth and cache settings.
func setAPIDefaults(a *API) {
	setZero(&a.Auth, DefaultAPIAuth)
	setZero(&a.Namespace, DefaultAPINamespace)
	setZero(&a.ProxyUserHeader, DefaultAPIProxyUserHeader)
	setZero(&a.ProxyGroupsHeader, DefaultAPIProxyGroupsHeader)
	if len(a.AllowedHosts) == 0 {
		a.AllowedHosts = DefaultAPIAllowedHosts()
	}
	setZero(&a.TokenAcceptTTL.Duration, DefaultAPITokenAcceptTTL)
	setZero(&a.TokenNegativeTTL.Duration, DefaultAPITokenNegativeTTL)
	setZero(&a.AccessAllowTTL.Duration, DefaultAPIAccessAllowTTL)
	setZero(&a.AccessDenyTTL.Duration, DefaultAPIAccessDenyTTL)
	setZero(&a.CacheSize, DefaultAPICacheSize)
	setZero(&a.PageSize, DefaultAPIPageSize)
	setZero(&a.AuthFailuresPerSource, DefaultAPIAuthFailuresPerSource)
	setZero(&a.AuthFailureBurst, DefaultAPIAuthFailureBurst)
	setZero(&a.TokenReviewQPS, DefaultAPITokenReviewQPS)
	setZero(&a.TokenReviewBurst, DefaultAPITokenReviewBurst)
	setZero(&a.AccessReviewQPS, DefaultAPIAccessReviewQPS)
	setZero(&a.AccessReviewBurst, DefaultAPIAccessReviewBurst)
	setZero(&a.StreamRecheck.Duration, DefaultAPIStreamRecheck)
}

// setStreamDefaults fills the bounds of what the API streams: events, live
// logs and run-live sessions.
func setStreamDefaults(p *Profile) {
	ev := &p.Events
	setZero(&ev.History, DefaultEventsHistory)
	setZero(&ev.HistoryBytes, DefaultEventsHistoryBytes)
	setZero(&ev.Queue, DefaultEventsQueue)
	setZero(&ev.QueueBytes, DefaultEventsQueueBytes)
	setZero(&ev.MaxStreams, DefaultEventsMaxStreams)
	setZero(&ev.MaxStreamsPerIdentity, DefaultEventsMaxStreamsPerIdentity)

	setZero(&p.Live.History, DefaultLiveHistory)
	setZero(&p.Live.HistoryBytes, DefaultLiveHistoryBytes)
	setZero(&p.Live.Buffer, DefaultLiveBuffer)
	setZero(&p.Live.ViewerBufferBytes, DefaultLiveViewerBufferBytes)
	setZero(&p.Live.ReadBytesPerSecond, DefaultLiveReadBytesPerSecond)
	setZero(&p.Live.WriteTimeout.Duration, DefaultLiveWriteTimeout)
	setZero(&p.Live.MaxViewers, DefaultLiveMaxViewers)
	setZero(&p.Live.MaxViewersPerIdentity, DefaultLiveMaxViewersPerIdentity)
	setZero(&p.Live.PollInterval.Duration, DefaultLivePollInterval)

	rl := &p.RunLive
	setZero(&rl.MaxSessions, DefaultRunLiveMaxSessions)
	setZero(&rl.MaxSessionsPerIdentity, DefaultRunLiveMaxSessionsPerIdentity)
	setZero(&rl.IdleTimeout.Duration, DefaultRunLiveIdleTimeout)
	setZero(&rl.WriteTimeout.Duration, DefaultRunLiveWriteTimeout)
	setZero(&rl.MaxSession.Duration, DefaultRunLiveMaxSession)
	setZero(&rl.OpensPerMinute, DefaultRunLiveOpensPerMinute)
}

// setClusterDefaults fills each spoke entry's client and run-live settings.
func setClusterDefaults(clusters []ClusterEntry) {
	for i := range clusters {
		e := &clusters[i]
		setZero(&e.TokenSource, DefaultTokenSource)
		if e.TokenSource == TokenSourceRequest {
			// Only a requested token has an audience and a lifetime of the
			// controller's choosing: in file mode both are the volume's,
			// and validation refuses them.
			setZero(&e.TokenAudience, e.Name)
			setZero(&e.TokenExpiration.Duration, DefaultTokenExpiration)
		}
		setZero(&e.QPS, DefaultQPS)
		setZero(&e.Burst, DefaultBurst)
		setZero(&e.RunLivePort, DefaultRunLivePort)
		if len(e.RunLivePorts) == 0 {
			e.RunLivePorts = []int{e.RunLivePort} // after the port's default
		}
	}
}

// setIngestDefaults fills the drop-box's limits, quotas and pacing.
func setIngestDefaults(in *Ingest) {
	setZero(&in.MaxBodyBytes, DefaultIngestMaxBodyBytes)
	setZero(&in.AcceptTTL.Duration, DefaultIngestAcceptTTL)
	setZero(&in.NegativeTTL.Duration, DefaultIngestNegativeTTL)
	setZero(&in.CacheSize, DefaultIngestCacheSize)
	setZero(&in.RatePerSource, DefaultIngestRatePerSource)
	setZero(&in.RateBurst, DefaultIngestRateBurst)
	setZero(&in.RatePerPod, DefaultIngestRatePerPod)
	setZero(&in.RateBurstPerPod, DefaultIngestRateBurstPod)
	setZero(&in.MaxKindsPerPod, DefaultIngestMaxKindsPerPod)
	setZero(&in.MaxBytesPerPod, DefaultIngestMaxBytesPerPod)
	setZero(&in.MinFreeBytes, DefaultIngestMinFreeBytes)
	setZero(&in.MaxTotalBytes, DefaultIngestMaxTotalBytes)
	setZero(&in.MaxBytesPerSubmitter, DefaultIngestMaxBytesPerSubmitter)
	setZero(&in.MaxBytesPerCluster, DefaultIngestMaxBytesPerCluster)
	setZero(&in.MaxStagingPerPod, DefaultIngestMaxStagingPerPod)
	setZero(&in.MinUploadRate, DefaultIngestMinUploadRate)
	setZero(&in.UploadRateWindow.Duration, DefaultIngestUploadRateWindow)
}

// setZero sets *v to def when it is the zero value: the profile's rule that
// a key left out, 0 or "" takes its default.
func setZero[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

package profile

import (
	"fmt"
	"math"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"crucible.dev/crucible/internal/urlcheck"
)

// Validate checks a profile whose defaults are applied (Parse does both) and
// reports every problem at once in a *ProfileError; nil when it is valid.
func (p *Profile) Validate() error {
	if errs := validateProfile(p); len(errs) > 0 {
		return &ProfileError{Errs: errs}
	}
	return nil
}

// problemText renders one finding as the profile's messages have always
// read and docs/config.md quotes them: `path "value": detail` for a value
// that is wrong, `path: detail` for one that is missing, not allowed (an
// unknown key) or of the wrong type, whose value may be a whole table
// (apimachinery's own rendering, `path: Invalid value: "value": detail`,
// speaks of API objects, not of a TOML file).
func problemText(e *field.Error) string {
	detail := e.Detail
	switch e.Type {
	case field.ErrorTypeRequired, field.ErrorTypeForbidden, field.ErrorTypeTypeInvalid:
		if detail == "" {
			detail = strings.ToLower(strings.TrimSuffix(e.Type.String(), " value"))
		}
		return e.Field + ": " + detail
	}
	if detail == "" {
		detail = strings.ToLower(e.Type.String())
	}
	return fmt.Sprintf("%s %q: %s", e.Field, fmt.Sprint(e.BadValue), detail)
}

// validateProfile is the profile's validation as a pure function (kueue's
// ValidateConfiguration is the model): every problem with its key path, in
// the order of the file's sections.
func validateProfile(p *Profile) field.ErrorList {
	errs := validateController(&p.Controller, field.NewPath("controller"))
	errs = append(errs, validateHub(&p.Hub, field.NewPath("hub"))...)
	mirror := field.NewPath("mirror")
	errs = append(errs, positive(mirror.Child("ttl"), p.Mirror.TTL)...)
	errs = append(errs, positive(mirror.Child("max_stale"), p.Mirror.MaxStale)...)
	errs = append(errs, validateReconcile(&p.Reconcile, field.NewPath("reconcile"))...)
	errs = append(errs, validatePods(&p.Pods, field.NewPath("pods"))...)
	errs = append(errs, ValidateIngest(&p.Ingest, field.NewPath("ingest"))...)
	errs = append(errs, validateAPI(&p.API, field.NewPath("api"), p.Controller.InternalListen)...)
	errs = append(errs, validateLive(&p.Live, field.NewPath("live"))...)
	errs = append(errs, validateEvents(&p.Events, field.NewPath("events"))...)
	errs = append(errs, validateRunLive(&p.RunLive, field.NewPath("run_live"))...)
	errs = append(errs, validateLeader(p)...)
	if len(p.Clusters) > 0 || p.Fleet.ClusterProfiles == "" {
		errs = append(errs, validateClusters(p.Clusters, field.NewPath("clusters"))...)
	}
	errs = append(errs, validateFleet(&p.Fleet, p.Pods.Classes, field.NewPath("fleet"))...)
	for i := range p.Clusters {
		errs = append(errs, validateClusterClasses(&p.Clusters[i], p.Pods.Classes, field.NewPath("clusters").Index(i))...)
	}

	defaultCluster := field.NewPath("default_cluster")
	switch {
	case p.DefaultCluster == AutoCluster:
	case p.DefaultCluster != "":
		if _, ok := p.Cluster(p.DefaultCluster); !ok {
			errs = append(errs, withDetail(field.NotFound(defaultCluster, p.DefaultCluster), "no such cluster"))
		}
	case len(p.Clusters) > 1:
		errs = append(errs, field.Required(defaultCluster, "required when there is more than one cluster"))
	}
	return errs
}

func validateClusters(clusters []ClusterEntry, path *field.Path) field.ErrorList {
	if len(clusters) == 0 {
		return field.ErrorList{field.Required(path, "at least one cluster is required (or [fleet] cluster_profiles)")}
	}
	var errs field.ErrorList
	first := map[string]int{}
	for i := range clusters {
		c := &clusters[i]
		errs = append(errs, validateCluster(c, path.Index(i))...)
		if c.Name == "" {
			continue
		}
		if j, dup := first[c.Name]; dup {
			errs = append(errs, withDetail(field.Duplicate(path.Index(i).Child("name"), c.Name), "duplicate of "+path.Index(j).Child("name").String()))
		} else {
			first[c.Name] = i
		}
	}
	return append(errs, validateTokenAudiences(clusters, path)...)
}

// hubAPIAudiences are the audiences the hub API accepts as its own that a
// profile can know of: a kube-apiserver's --api-audiences defaults to its
// --service-account-issuer, which in-cluster is one of these. The profile
// does not name the hub's actual --api-audiences, so an installation with
// another issuer is checked against these alone.
var hubAPIAudiences = []string{"https://kubernetes.default.svc", "https://kubernetes.default.svc.cluster.local"}

// validateTokenAudiences keeps each requested spoke token for its own
// spoke: a token_audience shared by two spokes is a token one spoke could
// replay at the other, one equal to an ingest_audience is a bearer token
// the drop-box accepts, and one of the hub API's audiences would make the
// spoke's token a hub credential (the hub's TokenRequest grants it).
func validateTokenAudiences(clusters []ClusterEntry, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	ingest := map[string]int{}
	for i := range clusters {
		if a := clusters[i].IngestAudience; a != "" {
			if _, seen := ingest[a]; !seen {
				ingest[a] = i
			}
		}
	}
	first := map[string]int{}
	for i := range clusters {
		c := &clusters[i]
		if c.TokenSource != TokenSourceRequest || c.TokenAudience == "" {
			continue
		}
		aud := path.Index(i).Child("token_audience")
		if j, dup := first[c.TokenAudience]; dup {
			errs = append(errs, withDetail(field.Duplicate(aud, c.TokenAudience),
				"duplicate of "+path.Index(j).Child("token_audience").String()+": each spoke's token must be good for that spoke alone"))
		} else {
			first[c.TokenAudience] = i
		}
		if j, ok := ingest[c.TokenAudience]; ok {
			errs = append(errs, field.Invalid(aud, c.TokenAudience,
				"must differ from "+path.Index(j).Child("ingest_audience").String()+": the drop-box would accept this spoke's token"))
		}
		if slices.Contains(hubAPIAudiences, c.TokenAudience) {
			errs = append(errs, field.Invalid(aud, c.TokenAudience, "must not be one of the hub API's audiences: the token would be a hub credential"))
		}
	}
	return errs
}

func validateController(c *Controller, path *field.Path) field.ErrorList {
	errs := dnsLabel(path.Child("instance"), c.Instance)
	errs = append(errs, listener(path.Child("internal_listen"), c.InternalListen, "internal_tls_cert", c.InternalTLSCert != "")...)
	errs = append(errs, certPair(path, "internal_tls", c.InternalTLSCert, c.InternalTLSKey)...)
	errs = append(errs, listener(path.Child("external_listen"), c.ExternalListen, "external_tls_cert", c.ExternalTLSCert != "")...)
	errs = append(errs, certPair(path, "external_tls", c.ExternalTLSCert, c.ExternalTLSKey)...)
	if c.ExternalURL == "" {
		errs = append(errs, field.Required(path.Child("external_url"), ""))
	} else {
		// The mirror serves its two paths at the root of the listener.
		errs = append(errs, checkURL(path.Child("external_url"), c.ExternalURL, true, false)...)
	}
	store := path.Child("store")
	if file, ok := strings.CutPrefix(c.Store, "sqlite:"); ok {
		if file == "" {
			errs = append(errs, field.Invalid(store, c.Store, "sqlite: needs a file path, e.g. \"sqlite:crucible.db\""))
		}
	} else if !strings.HasPrefix(c.Store, "postgres://") && !strings.HasPrefix(c.Store, "postgresql://") {
		errs = append(errs, field.Invalid(store, c.Store, "must be \"sqlite:<path>\" or a postgres:// URL"))
	}
	errs = append(errs, notNegative(path.Child("max_request_bytes"), c.MaxRequestBytes)...)
	if c.MetricsListen != MetricsListenOff {
		metrics := path.Child("metrics_listen")
		if _, port, err := net.SplitHostPort(c.MetricsListen); err != nil {
			errs = append(errs, field.Invalid(metrics, c.MetricsListen, "must be host:port or \"off\""))
		} else if !validPort(port) {
			errs = append(errs, field.Invalid(metrics, c.MetricsListen, "port must be a number from 0 to 65535"))
		}
	}
	for i, h := range c.MetricsAllowedHosts {
		errs = append(errs, hostName(path.Child("metrics_allowed_hosts").Index(i), h)...)
	}
	return errs
}

func validateHub(h *Hub, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if h.Server == "" {
		// In-cluster: client-go reads the pod's own CA and token; a file
		// named here would be silently ignored.
		if h.CAFile != "" {
			errs = append(errs, field.Forbidden(path.Child("ca_file"), "only used with hub.server (in-cluster uses the pod's service-account CA)"))
		}
		if h.TokenFile != "" {
			errs = append(errs, field.Forbidden(path.Child("token_file"), "only used with hub.server (in-cluster uses the pod's service-account token)"))
		}
		return errs
	}
	errs = append(errs, checkURL(path.Child("server"), h.Server, false, true)...)
	if h.TokenFile == "" {
		errs = append(errs, field.Required(path.Child("token_file"), "required when hub.server is set"))
	}
	return errs
}

func validateReconcile(r *Reconcile, path *field.Path) field.ErrorList {
	errs := positive(path.Child("sweep_interval"), r.SweepInterval)
	errs = append(errs, positive(path.Child("orphan_grace"), r.OrphanGrace)...)
	errs = append(errs, positive(path.Child("retry_budget"), r.RetryBudget)...)
	errs = append(errs, positive(path.Child("max_backoff"), r.MaxBackoff)...)
	errs = append(errs, positive(path.Child("health_interval"), r.HealthInterval)...)
	errs = append(errs, positive(path.Child("retry_initial"), r.RetryInitial)...)
	errs = append(errs, notNegative(path.Child("workers"), r.Workers)...)
	errs = append(errs, notNegative(path.Child("sweep_page"), r.SweepPage)...)
	errs = append(errs, positive(path.Child("drain_timeout"), r.DrainTimeout)...)
	if r.MaxBackoff.Duration > r.RetryBudget.Duration && r.RetryBudget.Duration > 0 {
		errs = append(errs, field.Invalid(path.Child("max_backoff"), r.MaxBackoff.Duration, "must not exceed "+path.Child("retry_budget").String()))
	}
	if r.RetryInitial.Duration > r.MaxBackoff.Duration && r.MaxBackoff.Duration > 0 {
		errs = append(errs, field.Invalid(path.Child("retry_initial"), r.RetryInitial.Duration, "must not exceed "+path.Child("max_backoff").String()))
	}
	return errs
}

func validateLive(l *Live, path *field.Path) field.ErrorList {
	errs := notNegative(path.Child("history"), l.History)
	errs = append(errs, notNegative(path.Child("history_bytes"), l.HistoryBytes)...)
	errs = append(errs, notNegative(path.Child("buffer"), l.Buffer)...)
	errs = append(errs, notNegative(path.Child("viewer_buffer_bytes"), l.ViewerBufferBytes)...)
	errs = append(errs, notNegative(path.Child("read_bytes_per_second"), l.ReadBytesPerSecond)...)
	errs = append(errs, positive(path.Child("write_timeout"), l.WriteTimeout)...)
	errs = append(errs, notNegative(path.Child("max_viewers"), l.MaxViewers)...)
	errs = append(errs, notNegative(path.Child("max_viewers_per_identity"), l.MaxViewersPerIdentity)...)
	if l.MaxViewersPerIdentity > l.MaxViewers && l.MaxViewers > 0 {
		errs = append(errs, field.Invalid(path.Child("max_viewers_per_identity"), l.MaxViewersPerIdentity, "must not exceed "+path.Child("max_viewers").String()))
	}
	return append(errs, positive(path.Child("poll_interval"), l.PollInterval)...)
}

func validateEvents(e *Events, path *field.Path) field.ErrorList {
	errs := notNegative(path.Child("history"), e.History)
	errs = append(errs, notNegative(path.Child("history_bytes"), e.HistoryBytes)...)
	errs = append(errs, notNegative(path.Child("queue"), e.Queue)...)
	errs = append(errs, notNegative(path.Child("queue_bytes"), e.QueueBytes)...)
	errs = append(errs, notNegative(path.Child("max_streams"), e.MaxStreams)...)
	errs = append(errs, notNegative(path.Child("max_streams_per_identity"), e.MaxStreamsPerIdentity)...)
	if e.MaxStreamsPerIdentity > e.MaxStreams && e.MaxStreams > 0 {
		errs = append(errs, field.Invalid(path.Child("max_streams_per_identity"), e.MaxStreamsPerIdentity, "must not exceed "+path.Child("max_streams").String()))
	}
	return errs
}

func validateRunLive(r *RunLive, path *field.Path) field.ErrorList {
	errs := notNegative(path.Child("max_sessions"), r.MaxSessions)
	errs = append(errs, notNegative(path.Child("max_sessions_per_identity"), r.MaxSessionsPerIdentity)...)
	if r.MaxSessionsPerIdentity > r.MaxSessions && r.MaxSessions > 0 {
		errs = append(errs, field.Invalid(path.Child("max_sessions_per_identity"), r.MaxSessionsPerIdentity, "must not exceed "+path.Child("max_sessions").String()))
	}
	errs = append(errs, positive(path.Child("idle_timeout"), r.IdleTimeout)...)
	errs = append(errs, positive(path.Child("max_session"), r.MaxSession)...)
	errs = append(errs, notNegative(path.Child("opens_per_minute"), r.OpensPerMinute)...)
	return append(errs, positive(path.Child("write_timeout"), r.WriteTimeout)...)
}

// validateRunLivePorts checks a cluster's run-live ports: each a port
// number, run_live_port among them (run-live forwards to it).
func validateRunLivePorts(c *ClusterEntry, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if c.RunLivePort < 1 || c.RunLivePort > 65535 {
		errs = append(errs, field.Invalid(path.Child("run_live_port"), c.RunLivePort, "must be a port number from 1 to 65535"))
	}
	for i, port := range c.RunLivePorts {
		if port < 1 || port > 65535 {
			errs = append(errs, field.Invalid(path.Child("run_live_ports").Index(i), port, "must be a port number from 1 to 65535"))
		}
	}
	if !slices.Contains(c.RunLivePorts, c.RunLivePort) {
		errs = append(errs, field.Invalid(path.Child("run_live_ports"), c.RunLivePorts, fmt.Sprintf("must include run_live_port (%d)", c.RunLivePort)))
	}
	return errs
}

// ValidateIngest checks an [ingest] section whose defaults are applied:
// every limit positive, every trusted proxy a CIDR. Parse checks the
// profile's section with it, and the drop-box the section it is given, so
// that one built by hand (tests start from Default().Ingest) is held to
// the same rules with the same messages.
func ValidateIngest(in *Ingest, path *field.Path) field.ErrorList {
	errs := positiveNumber(path.Child("max_body_bytes"), in.MaxBodyBytes)
	errs = append(errs, positive(path.Child("accept_ttl"), in.AcceptTTL)...)
	errs = append(errs, positive(path.Child("negative_ttl"), in.NegativeTTL)...)
	errs = append(errs, positiveNumber(path.Child("cache_size"), in.CacheSize)...)
	errs = append(errs, positiveNumber(path.Child("rate_per_source"), in.RatePerSource)...)
	errs = append(errs, positiveNumber(path.Child("rate_burst"), in.RateBurst)...)
	errs = append(errs, positiveNumber(path.Child("rate_per_pod"), in.RatePerPod)...)
	errs = append(errs, positiveNumber(path.Child("rate_burst_per_pod"), in.RateBurstPerPod)...)
	errs = append(errs, positiveNumber(path.Child("max_kinds_per_pod"), in.MaxKindsPerPod)...)
	errs = append(errs, positiveNumber(path.Child("max_bytes_per_pod"), in.MaxBytesPerPod)...)
	errs = append(errs, positiveNumber(path.Child("min_free_bytes"), in.MinFreeBytes)...)
	errs = append(errs, positiveNumber(path.Child("max_total_bytes"), in.MaxTotalBytes)...)
	errs = append(errs, positiveNumber(path.Child("max_bytes_per_submitter"), in.MaxBytesPerSubmitter)...)
	errs = append(errs, positiveNumber(path.Child("max_bytes_per_cluster"), in.MaxBytesPerCluster)...)
	errs = append(errs, positiveNumber(path.Child("max_staging_per_pod"), in.MaxStagingPerPod)...)
	errs = append(errs, positiveNumber(path.Child("min_upload_rate"), in.MinUploadRate)...)
	errs = append(errs, positive(path.Child("upload_rate_window"), in.UploadRateWindow)...)
	return append(errs, cidrs(path.Child("trusted_proxies"), in.TrustedProxies)...)
}

func validatePods(p *Pods, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, checkTokenLifetime(path.Child("ingest_token_expiration"), p.IngestTokenExpiration.Duration,
		MinIngestTokenExpiration, "10m (the kubelet's minimum)", MaxIngestTokenExpiration, "2^32 seconds")...)
	errs = append(errs, labelMap(path.Child("node_selector"), p.NodeSelector)...)
	for i, prefix := range p.MetadataPrefixes {
		errs = append(errs, metadataPrefix(path.Child("metadata_prefixes").Index(i), prefix)...)
	}
	errs = append(errs, validateClasses(p.Classes, path.Child("classes"))...)
	switch p.ImagePullPolicy {
	case "", "Always", "IfNotPresent", "Never":
	default:
		errs = append(errs, withDetail(field.NotSupported(path.Child("image_pull_policy"), p.ImagePullPolicy, []string{"Always", "IfNotPresent", "Never"}),
			"must be Always, IfNotPresent or Never"))
	}
	if strings.ContainsFunc(p.PushImage, func(r rune) bool { return r <= ' ' || r == 0x7f || r == utf8.RuneError }) {
		errs = append(errs, field.Invalid(path.Child("push_image"), p.PushImage, "must be an image reference, without whitespace or control characters"))
	}
	return append(errs, notNegative(path.Child("max_log_bytes"), p.MaxLogBytes)...)
}

func validateCluster(c *ClusterEntry, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	// required reports an empty key; the checks of a present one follow.
	required := func(key, v string) bool {
		if v == "" {
			errs = append(errs, field.Required(path.Child(key), ""))
		}
		return v != ""
	}
	if required("name", c.Name) {
		errs = append(errs, dnsLabel(path.Child("name"), c.Name)...)
	}
	if c.Name == AutoCluster {
		errs = append(errs, field.Invalid(path.Child("name"), c.Name, "is reserved: default_cluster and a submission's cluster \"auto\" ask placement to pick the spoke"))
	}
	if required("server", c.Server) {
		errs = append(errs, checkURL(path.Child("server"), c.Server, false, true)...)
	}
	if len(c.CAData) == 0 {
		required("ca_file", c.CAFile)
	}
	errs = append(errs, validateTokenSource(c, path)...)
	if required("loop_namespace", c.LoopNamespace) {
		errs = append(errs, dnsLabel(path.Child("loop_namespace"), c.LoopNamespace)...)
	}
	if required("turn_service_account", c.TurnServiceAccount) && len(validation.IsDNS1123Subdomain(c.TurnServiceAccount)) > 0 {
		errs = append(errs, field.Invalid(path.Child("turn_service_account"), c.TurnServiceAccount, "must be a DNS subdomain (a service account name)"))
	}
	if required("ingest_url", c.IngestURL) {
		errs = append(errs, checkURL(path.Child("ingest_url"), c.IngestURL, true, true)...)
	}
	if required("ingest_audience", c.IngestAudience) && strings.ContainsFunc(c.IngestAudience, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		errs = append(errs, field.Invalid(path.Child("ingest_audience"), c.IngestAudience, "must not contain spaces or control characters"))
	}
	if !(c.QPS > 0) || math.IsInf(float64(c.QPS), 0) {
		errs = append(errs, field.Invalid(path.Child("qps"), c.QPS, "must be positive"))
	}
	if c.Burst <= 0 {
		errs = append(errs, field.Invalid(path.Child("burst"), c.Burst, "must be positive"))
	}
	return append(errs, validateRunLivePorts(c, path)...)
}

// validateTokenSource checks where the cluster's token comes from: a file
// (token_file, nothing else), or the hub's TokenRequest API (no file; the
// audience and lifetime asked for). A key the chosen source does not use is
// refused rather than ignored.
func validateTokenSource(c *ClusterEntry, path *field.Path) field.ErrorList {
	const onlyRequest = "only used with token_source = \"request\" (a token file's audience and lifetime are its projected volume's)"
	var errs field.ErrorList
	switch c.TokenSource {
	case TokenSourceFile:
		if c.TokenFile == "" {
			errs = append(errs, field.Required(path.Child("token_file"), ""))
		}
		if c.TokenAudience != "" {
			errs = append(errs, field.Forbidden(path.Child("token_audience"), onlyRequest))
		}
		if c.TokenExpiration.Duration != 0 {
			errs = append(errs, field.Forbidden(path.Child("token_expiration"), onlyRequest))
		}
	case TokenSourceRequest:
		if c.TokenFile != "" {
			errs = append(errs, field.Forbidden(path.Child("token_file"), "not used with token_source = \"request\" (the token comes from the hub's TokenRequest API)"))
		}
		if strings.ContainsFunc(c.TokenAudience, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
			errs = append(errs, field.Invalid(path.Child("token_audience"), c.TokenAudience, "must not contain spaces or control characters"))
		}
		errs = append(errs, checkTokenLifetime(path.Child("token_expiration"), c.TokenExpiration.Duration,
			MinTokenExpiration, "10m (TokenRequest's minimum)", MaxTokenExpiration, "24h")...)
	default:
		errs = append(errs, withDetail(field.NotSupported(path.Child("token_source"), c.TokenSource, []string{TokenSourceFile, TokenSourceRequest}),
			"must be \"file\" or \"request\""))
	}
	return errs
}

// withDetail words an error whose constructor takes no detail (Duplicate,
// NotFound) or words it the API-object way (NotSupported), keeping its type.
func withDetail(e *field.Error, detail string) *field.Error {
	e.Detail = detail
	return e
}

func dnsLabel(path *field.Path, v string) field.ErrorList {
	if len(validation.IsDNS1123Label(v)) > 0 {
		return field.ErrorList{field.Invalid(path, v, "must be a DNS label")}
	}
	return nil
}

func positive(path *field.Path, d Duration) field.ErrorList {
	if d.Duration <= 0 {
		return field.ErrorList{field.Invalid(path, d.Duration, "must be positive")}
	}
	return nil
}

// positiveNumber checks a limit that has no zero meaning: one a caller
// passes on without the defaults, which a zero has not taken, is refused
// as a negative one is.
func positiveNumber[T int | int64 | float32](path *field.Path, v T) field.ErrorList {
	if v <= 0 {
		return field.ErrorList{field.Invalid(path, v, "must be positive")}
	}
	return nil
}

// notNegative checks a limit whose zero took its default: only a negative
// value is left to refuse.
func notNegative[T int | int64 | float32](path *field.Path, v T) field.ErrorList {
	if v < 0 {
		return field.ErrorList{field.Invalid(path, v, "must be positive")}
	}
	return nil
}

func cidrs(path *field.Path, list []string) field.ErrorList {
	var errs field.ErrorList
	for i, cidr := range list {
		if _, err := netip.ParsePrefix(cidr); err != nil {
			errs = append(errs, field.Invalid(path.Index(i), cidr, "must be a CIDR such as 10.0.0.0/8"))
		}
	}
	return errs
}

// certPair requires a certificate and its key together; stem is the keys'
// common start under parent, e.g. "internal_tls".
func certPair(parent *field.Path, stem, cert, key string) field.ErrorList {
	switch {
	case cert != "" && key == "":
		return field.ErrorList{field.Required(parent.Child(stem+"_key"), "required when "+stem+"_cert is set")}
	case cert == "" && key != "":
		return field.ErrorList{field.Required(parent.Child(stem+"_cert"), "required when "+stem+"_key is set")}
	}
	return nil
}

func validPort(port string) bool {
	n, err := strconv.Atoi(port)
	return err == nil && n >= 0 && n <= 65535
}

// listener checks a host:port to listen on; without TLS only a loopback
// address may serve plain HTTP (tokens cross the listeners).
func listener(path *field.Path, addr, certKey string, tls bool) field.ErrorList {
	host, port, err := net.SplitHostPort(addr)
	switch {
	case err != nil:
		return field.ErrorList{field.Invalid(path, addr, "must be host:port")}
	case !validPort(port):
		return field.ErrorList{field.Invalid(path, addr, "port must be a number from 0 to 65535")}
	case !tls && !urlcheck.LoopbackHost(host):
		return field.ErrorList{field.Invalid(path, addr, "plain HTTP (no "+certKey+") is only allowed on a loopback address")}
	}
	return nil
}

// checkURL reports all that is wrong with raw as a base URL as one problem
// (urlcheck.BaseURL).
func checkURL(path *field.Path, raw string, httpLoopback, pathAllowed bool) field.ErrorList {
	if problems := urlcheck.BaseURL(raw, httpLoopback, pathAllowed); len(problems) > 0 {
		return field.ErrorList{field.Invalid(path, raw, strings.Join(problems, "; "))}
	}
	return nil
}

// checkTokenLifetime holds a requested token's lifetime d to [lo, hi] in
// whole seconds: the API takes expirationSeconds, and refuses less than its
// minimum.
func checkTokenLifetime(path *field.Path, d, lo time.Duration, loText string, hi time.Duration, hiText string) field.ErrorList {
	switch {
	case d < lo:
		return field.ErrorList{field.Invalid(path, d, "must be at least "+loText)}
	case d > hi:
		return field.ErrorList{field.Invalid(path, d, "must be at most "+hiText)}
	case d%time.Second != 0:
		return field.ErrorList{field.Invalid(path, d, "must be whole seconds")}
	}
	return nil
}

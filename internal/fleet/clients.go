package fleet

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"

	"crucible.dev/crucible/internal/profile"
)

// Client is the one shared client of one cluster (R-ID2). Every caller
// (dispatch, watch, logs, TokenReview, reconcile, sweep, health) uses it; none
// builds its own.
type Client struct {
	// Entry is the cluster's profile entry.
	Entry profile.ClusterEntry
	// Config is the configuration Kube and HTTP were built from. Its
	// WrapTransport injects the token from the entry's token source (see
	// NewClients); BearerToken and BearerTokenFile are empty. Treat it as
	// read-only (rest.CopyConfig before changing anything) and prefer HTTP
	// to building a new transport.
	Config *rest.Config
	// HTTP is the authenticated HTTP client under Kube (not throttled by
	// QPS and Burst, which live in the clientset; following no redirect,
	// see NewClientset), for
	// requests the typed clientset does not cover (e.g. /openid/v1/jwks).
	// It shares Kube's connections.
	HTTP *http.Client
	// Kube is the typed clientset.
	Kube kubernetes.Interface
	// Metadata lists objects' metadata only, over Kube's connections: for
	// a read that needs names, labels and times, not whole objects (the
	// sweep's list of every pod on the cluster).
	Metadata metadata.Interface

	tokens tokenSource

	mu     sync.Mutex
	health Health
}

// tokenSource is what a client's transport takes its tokens from (a 401
// resets it), and what its health reads the token's expiry from.
type tokenSource interface {
	transport.ResettableTokenSource
	// Expiry is the expiry of the token in use; false when unknown.
	Expiry() (time.Time, bool)
}

var (
	_ tokenSource = fileTokens{}
	_ tokenSource = (*requestedTokens)(nil)
)

// fileTokens is an entry's token file, read through client-go's cached file
// token source.
type fileTokens struct {
	transport.ResettableTokenSource
	path string
}

// Expiry is the exp claim of the token now in the file.
func (f fileTokens) Expiry() (time.Time, bool) { return readTokenExpiry(f.path) }

// Clients holds one Client per cluster: built by NewClients, changed by
// Update when a reloaded profile adds, changes or removes a spoke.
type Clients struct {
	opts clientsOptions
	log  *slog.Logger

	// updateMu makes Update one at a time; it builds the new clients
	// holding it alone, so that readers (every API request, every loop)
	// wait for mu only while the lists are swapped.
	updateMu sync.Mutex

	mu     sync.RWMutex
	list   []*Client // the profile's order, then the draining ones
	byName map[string]*Client
	// draining are clusters the profile no longer lists whose rows are
	// still followed until they end (package controller drains them),
	// then forgotten.
	draining map[string]bool
}

// Option adjusts NewClients.
type Option func(*clientsOptions)

type clientsOptions struct {
	hub *HubAccount
	now func() time.Time
}

// WithHubAccount lets entries with token_source = "request" ask hub's
// TokenRequest API for their tokens; without it NewClients refuses them.
func WithHubAccount(hub *HubAccount) Option {
	return func(o *clientsOptions) { o.hub = hub }
}

// NewClients builds one client per cluster entry, in order. Each
// authenticates with the entry's token file, which is re-read at least once a
// minute and after any 401 (R-ID1), so a rotated token is picked up without a
// restart; building a client reads the token file once, so a missing or
// empty file is an error here. An entry with token_source = "request" gets
// its tokens from the hub (WithHubAccount, see requestedTokens) when its
// client first needs one: a hub that refuses shows in the cluster's health
// and in every call to it, not as a controller that will not start.
func NewClients(entries []profile.ClusterEntry, opts ...Option) (*Clients, error) {
	o := clientsOptions{now: time.Now}
	for _, opt := range opts {
		opt(&o)
	}
	cs := &Clients{opts: o, byName: make(map[string]*Client, len(entries)), draining: map[string]bool{}, log: slog.New(slog.DiscardHandler)}
	for _, e := range entries {
		if _, dup := cs.byName[e.Name]; dup {
			return nil, fmt.Errorf("cluster %s: defined twice", e.Name)
		}
		c, err := newClient(e, o)
		if err != nil {
			return nil, fmt.Errorf("cluster %s: %w", e.Name, err)
		}
		cs.list = append(cs.list, c)
		cs.byName[e.Name] = c
	}
	return cs, nil
}

// Changes is what Update did, by cluster name in the profile's order.
type Changes struct {
	// Added clusters are new; Changed ones have a new client, since their
	// entry differs (their users must move to it: the old one keeps
	// working meanwhile); Removed ones are draining.
	Added, Changed, Removed []string
	// Returned are clusters that were draining and are listed again: they
	// have a new client, as a changed one does.
	Returned []string
}

// Empty reports whether the update changed no cluster.
func (c Changes) Empty() bool {
	return len(c.Added)+len(c.Changed)+len(c.Removed)+len(c.Returned) == 0
}

// Update makes the clients those of entries, a reloaded profile's: a new
// entry gets a client, an entry that differs in anything gets a new one,
// an unchanged one keeps its client (and its connections and health), and
// a cluster no longer listed stays, draining, until Forget. Every new
// client is built before anything changes, so an entry whose client cannot
// be built (its token file missing) fails the update whole, naming it,
// and the clients stay as they were. opts add to NewClient's (a hub
// account once an entry asks for requested tokens).
func (cs *Clients) Update(entries []profile.ClusterEntry, opts ...Option) (Changes, error) {
	cs.updateMu.Lock()
	defer cs.updateMu.Unlock()
	cs.mu.RLock()
	o, byName, draining := cs.opts, cs.byName, cs.draining
	cs.mu.RUnlock()
	for _, opt := range opts {
		opt(&o)
	}
	// Building a client reads its token file: done before mu is taken, so
	// that a reload adding fifty spokes holds no reader up. Only Update
	// adds or replaces clients, and Forget drops draining ones alone, so
	// what was read above still holds for every entry listed.
	var ch Changes
	next := make(map[string]*Client, len(entries))
	list := make([]*Client, 0, len(entries))
	for _, e := range entries {
		if _, dup := next[e.Name]; dup {
			return Changes{}, fmt.Errorf("cluster %s: defined twice", e.Name)
		}
		old, had := byName[e.Name]
		c := old
		if !had || draining[e.Name] || !reflect.DeepEqual(old.Entry, e) {
			var err error
			if c, err = newClient(e, o); err != nil {
				return Changes{}, fmt.Errorf("cluster %s: %w", e.Name, err)
			}
		}
		switch {
		case !had:
			ch.Added = append(ch.Added, e.Name)
		case draining[e.Name]:
			ch.Returned = append(ch.Returned, e.Name)
		case c != old:
			ch.Changed = append(ch.Changed, e.Name)
		}
		next[e.Name] = c
		list = append(list, c)
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	// The clusters no longer listed drain, from the lists as they are now:
	// one Forget dropped meanwhile stays dropped.
	nowDraining := map[string]bool{}
	for _, c := range cs.list {
		name := c.Entry.Name
		if _, listed := next[name]; listed {
			continue
		}
		if !cs.draining[name] {
			ch.Removed = append(ch.Removed, name)
		}
		nowDraining[name] = true
		next[name] = c
		list = append(list, c)
	}
	cs.opts, cs.list, cs.byName, cs.draining = o, list, next, nowDraining
	return ch, nil
}

// Draining reports whether the cluster called name is no longer in the
// profile and is kept only for the rows it still runs.
func (cs *Clients) Draining(name string) bool {
	cs.mu.RLock()
	defer cs.mu.RUnlock()
	return cs.draining[name]
}

// Forget drops a drained cluster's client; a cluster the profile lists
// again meanwhile is kept.
func (cs *Clients) Forget(name string) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if !cs.draining[name] {
		return
	}
	delete(cs.draining, name)
	delete(cs.byName, name)
	cs.list = slices.DeleteFunc(cs.list, func(c *Client) bool { return c.Entry.Name == name })
}

// SetLogger makes ProbeLoop log health changes to l (by default, and with
// nil, nothing is logged). Call it before ProbeLoop starts.
func (cs *Clients) SetLogger(l *slog.Logger) {
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	cs.log = l
}

func newClient(e profile.ClusterEntry, o clientsOptions) (*Client, error) {
	tokens, err := entryTokens(e, o)
	if err != nil {
		return nil, err
	}
	cfg := restConfig(e, tokens)
	windowed, err := withStreamWindow(cfg)
	if err != nil {
		return nil, fmt.Errorf("build client: %w", err)
	}
	httpClient, kube, err := NewClientset("spoke "+e.Name, windowed)
	if err != nil {
		return nil, err
	}
	meta, err := metadata.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("build metadata client: %w", err)
	}
	return &Client{
		Entry:    e,
		Config:   cfg,
		HTTP:     httpClient,
		Kube:     kube,
		Metadata: meta,
		tokens:   tokens,
		health:   Health{Cluster: e.Name},
	}, nil
}

// entryTokens is the token source of entry e. An entry built without Parse
// (a test's, a tool's) has no token_source: its token file.
func entryTokens(e profile.ClusterEntry, o clientsOptions) (tokenSource, error) {
	switch e.TokenSource {
	case "", profile.TokenSourceFile:
		tokens := transport.NewCachedFileTokenSource(e.TokenFile)
		// Fail now on a missing or empty token file, as client-go's own
		// BearerTokenFile does, rather than on every request later.
		if _, err := tokens.Token(); err != nil {
			return nil, err
		}
		return fileTokens{tokens, e.TokenFile}, nil
	case profile.TokenSourceRequest:
		if o.hub == nil {
			return nil, errors.New("token_source = \"request\" needs the controller's hub account (fleet.WithHubAccount)")
		}
		return newRequestedTokens(e, o.hub, o.now), nil
	}
	return nil, fmt.Errorf("token_source %q: must be %q or %q", e.TokenSource, profile.TokenSourceFile, profile.TokenSourceRequest)
}

// ErrRedirect is a cluster's API server answering with a redirect, which no
// client NewClientset builds follows.
var ErrRedirect = errors.New("redirect refused")

// maxTargetBytes bounds how much of a redirect's target an error quotes: the
// answering server chose it.
const maxTargetBytes = 200

// NewClientset builds the HTTP client of cfg and the typed clientset over
// it; who names the cluster in errors ("spoke wharf", "hub"). Neither
// follows a redirect, streams included: the transport adds the cluster's
// token to every request, so following one would hand the token to any
// address a compromised cluster (or whatever sits in front of it) names,
// and its answer — a pod's log, a TokenReview's verdict — would be taken
// for the cluster's.
func NewClientset(who string, cfg *rest.Config) (*http.Client, *kubernetes.Clientset, error) {
	shared, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("build client: %w", err)
	}
	// A copy: for a config without TLS or auth, client-go hands out
	// http.DefaultClient itself.
	httpClient := *shared
	httpClient.CheckRedirect = refuseRedirects(who)
	kube, err := kubernetes.NewForConfigAndClient(cfg, &httpClient)
	if err != nil {
		return nil, nil, fmt.Errorf("build clientset: %w", err)
	}
	return &httpClient, kube, nil
}

// streamWindow is how far one response of a cluster may run ahead of what
// the controller has read of it: HTTP/2's per-stream flow-control window,
// which Go's transport makes 4 MiB. Every response of a cluster shares its
// one connection (R-ID2), so the bytes a stream has in flight are bytes
// every other stream's next frame waits behind: a pod flooding its log,
// read for its live viewers at [live] read_bytes_per_second, would put 4 MiB
// ahead of the other pods' lines at once, and hold as much in the
// controller for every such pod. 1 MiB still lets a whole log be collected
// at 20 MiB/s over a 50 ms round trip.
const streamWindow = 1 << 20

// withStreamWindow is a copy of a spoke's cfg over a transport built as
// client-go builds its own (TLS from cfg, HTTP/2, client-go's keep-alive
// pings) but with streamWindow. The TLS settings move into that transport,
// as client-go refuses a config that has both; a spoke's are a CA only
// (restConfig), so nothing client-go would rotate is lost. Client.Config
// stays cfg itself: port-forward dials its own connections from it.
func withStreamWindow(cfg *rest.Config) (*rest.Config, error) {
	t, err := windowedTransport(cfg)
	if err != nil {
		return nil, err
	}
	own := rest.CopyConfig(cfg)
	own.TLSClientConfig, own.Transport, own.Proxy, own.Dial = rest.TLSClientConfig{}, t, nil, nil
	return own, nil
}

// windowedTransports shares one windowed transport among the spokes whose
// TLS settings are the same, as client-go's own transport cache shared its
// transports: spokes served by one API server (loop namespaces of one
// cluster) then share its one HTTP/2 connection, and their watches' frames
// one socket, instead of a connection, a TLS session and a reader each. The
// token is no part of it: each spoke's is added to its own requests by its
// WrapTransport. Entries are never dropped (a key per CA ever configured),
// as client-go's are not.
var windowedTransports = struct {
	sync.Mutex
	m map[transportKey]*http.Transport
}{m: map[transportKey]*http.Transport{}}

// transportKey is what a windowed transport is built from. The CA is
// compared by its bytes, read once here, so a spoke added after its CA file
// was rotated trusts the new CA.
type transportKey struct {
	ca, serverName, nextProtos   string
	insecure, disableCompression bool
}

func windowedTransport(cfg *rest.Config) (*http.Transport, error) {
	if tc := cfg.TLSClientConfig; len(tc.CAData) == 0 && tc.CAFile != "" {
		ca, err := os.ReadFile(tc.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read CA file: %w", err)
		}
		cfg = rest.CopyConfig(cfg)
		cfg.CAData, cfg.CAFile = ca, ""
	}
	// What the key cannot compare (a client certificate, a proxy or a dialer
	// of its own) gets a transport of its own; a spoke's config has none.
	tc := cfg.TLSClientConfig
	if tc.CertFile != "" || tc.KeyFile != "" || len(tc.CertData) > 0 || len(tc.KeyData) > 0 ||
		cfg.Proxy != nil || cfg.Dial != nil {
		return buildWindowedTransport(cfg)
	}
	key := transportKey{ca: string(tc.CAData), serverName: tc.ServerName, nextProtos: strings.Join(tc.NextProtos, ","),
		insecure: tc.Insecure, disableCompression: cfg.DisableCompression}
	windowedTransports.Lock()
	defer windowedTransports.Unlock()
	if t, ok := windowedTransports.m[key]; ok {
		return t, nil
	}
	t, err := buildWindowedTransport(cfg)
	if err != nil {
		return nil, err
	}
	windowedTransports.m[key] = t
	return t, nil
}

// buildWindowedTransport builds the transport of cfg, its CA parsed into
// the TLS config here: once per shared transport, not once per spoke.
func buildWindowedTransport(cfg *rest.Config) (*http.Transport, error) {
	tlsConfig, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, err
	}
	return utilnet.SetTransportDefaults(&http.Transport{
		Proxy:               cfg.Proxy,
		TLSClientConfig:     tlsConfig,
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 25,
		DialContext:         cfg.Dial,
		DisableCompression:  cfg.DisableCompression,
		HTTP2:               &http.HTTP2Config{MaxReceiveBufferPerStream: streamWindow},
	}), nil
}

// refuseRedirects is a CheckRedirect that fails every redirect with
// ErrRedirect, naming who and the target (without its query, which may be
// long, and user info).
func refuseRedirects(who string) func(*http.Request, []*http.Request) error {
	return func(target *http.Request, _ []*http.Request) error {
		u := *target.URL
		u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
		to := u.String()
		if len(to) > maxTargetBytes {
			to = strings.ToValidUTF8(to[:maxTargetBytes], "") + "…"
		}
		return redirectError{fmt.Errorf("%w: %s answered with a redirect to %s", ErrRedirect, who, to)}
	}
}

// redirectError is ErrRedirect as an answer: net/http wraps it in a
// *url.Error, which is a net.Error and so would read as a network blip to
// retry.IsTransient. A redirect is the cluster's reply, and asking again
// gets the same one.
type redirectError struct{ error }

func (e redirectError) Unwrap() error { return e.error }

// Permanent tells retry.IsTransient not to retry.
func (redirectError) Permanent() bool { return true }

// restConfig is the client configuration of a cluster. The token stays in
// its file (R-ID1), read through client-go's cached file token source, which
// re-reads the file once a minute, or in the memory of the entry's
// requestedTokens. It is wired in through WrapTransport rather than
// BearerTokenFile because only this way a 401 also resets the source, so
// the request after a rejected token carries the file's current one (or a
// newly requested one): client-go's BearerTokenFile transport re-reads only
// on its minute timer. Never BearerToken, which would freeze the first
// token forever.
func restConfig(e profile.ClusterEntry, tokens transport.ResettableTokenSource) *rest.Config {
	cfg := tokenConfig(e.Server, e.CAFile, tokens)
	if len(e.CAData) > 0 { // a ClusterProfile's (package inventory)
		cfg.TLSClientConfig = rest.TLSClientConfig{CAData: e.CAData}
	}
	cfg.QPS, cfg.Burst, cfg.UserAgent = e.QPS, e.Burst, "crucible/"+e.Name
	SpeakProtobuf(cfg)
	return cfg
}

// SpeakProtobuf makes cfg's typed clients send and ask for Kubernetes'
// protobuf encoding (JSON still accepted), as kube-controller-manager and
// the scheduler do: a spoke client carries every work pod's create and
// watch event, and JSON costs both ends several times the CPU on a machine
// whose cores the spokes need. Only for clients of built-in kinds: a
// custom resource has no protobuf form.
func SpeakProtobuf(cfg *rest.Config) {
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
}

func tokenConfig(server, caFile string, tokens transport.ResettableTokenSource) *rest.Config {
	return &rest.Config{
		Host:            server,
		TLSClientConfig: rest.TLSClientConfig{CAFile: caFile},
		WrapTransport:   transport.ResettableTokenSourceWrapTransport(tokens),
	}
}

// TokenFileConfig is a client configuration that authenticates with the
// token in tokenFile the way the spoke clients do (re-read every minute and
// after a 401); the controller uses it for its own hub API as well.
func TokenFileConfig(server, caFile, tokenFile string) (*rest.Config, error) {
	tokens := transport.NewCachedFileTokenSource(tokenFile)
	if _, err := tokens.Token(); err != nil {
		return nil, err
	}
	return tokenConfig(server, caFile, tokens), nil
}

// Get returns the client of the cluster called name, draining or not.
func (cs *Clients) Get(name string) (*Client, bool) {
	cs.mu.RLock()
	defer cs.mu.RUnlock()
	c, ok := cs.byName[name]
	return c, ok
}

// All returns every client in profile order, then the draining ones.
func (cs *Clients) All() []*Client {
	cs.mu.RLock()
	defer cs.mu.RUnlock()
	return slices.Clone(cs.list)
}

// Server is the REST client of the cluster's API server itself (its
// /readyz), for retry.NotReady; nil for a client without a clientset.
func (c *Client) Server() rest.Interface {
	if c.Kube == nil {
		return nil
	}
	return c.Kube.Discovery().RESTClient()
}

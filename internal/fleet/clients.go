package fleet

import (
	"fmt"
	"log/slog"
	"net/http"
	"sync"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
)

// Client is the one shared client of one cluster (R-ID2). Every caller
// (dispatch, watch, logs, TokenReview, reconcile, sweep, health) uses it; none
// builds its own.
type Client struct {
	// Entry is the cluster's profile entry.
	Entry ClusterEntry
	// Config is the configuration Kube and HTTP were built from. Its
	// WrapTransport injects the token from the entry's token file (see
	// NewClients); BearerToken and BearerTokenFile are empty. Treat it as
	// read-only (rest.CopyConfig before changing anything) and prefer HTTP
	// to building a new transport.
	Config *rest.Config
	// HTTP is the authenticated HTTP client under Kube (not throttled by
	// QPS and Burst, which live in the clientset), for
	// requests the typed clientset does not cover (e.g. /openid/v1/jwks).
	// It shares Kube's connections.
	HTTP *http.Client
	// Kube is the typed clientset.
	Kube kubernetes.Interface

	mu     sync.Mutex
	health Health
}

// Clients holds one Client per cluster, built once by NewClients.
type Clients struct {
	list   []*Client
	byName map[string]*Client
	log    *slog.Logger
}

// NewClients builds one client per cluster entry, in order. Each
// authenticates with the entry's token file, which is re-read at least once a
// minute and after any 401 (R-ID1), so a rotated token is picked up without a
// restart. Building a client reads the token file once, so a missing or empty
// file is an error here.
func NewClients(entries []ClusterEntry) (*Clients, error) {
	cs := &Clients{byName: make(map[string]*Client, len(entries)), log: slog.New(slog.DiscardHandler)}
	for _, e := range entries {
		if _, dup := cs.byName[e.Name]; dup {
			return nil, fmt.Errorf("cluster %s: defined twice", e.Name)
		}
		c, err := newClient(e)
		if err != nil {
			return nil, fmt.Errorf("cluster %s: %w", e.Name, err)
		}
		cs.list = append(cs.list, c)
		cs.byName[e.Name] = c
	}
	return cs, nil
}

// SetLogger makes ProbeLoop log health changes to l (by default, and with
// nil, nothing is logged). Call it before ProbeLoop starts.
func (cs *Clients) SetLogger(l *slog.Logger) {
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	cs.log = l
}

func newClient(e ClusterEntry) (*Client, error) {
	tokens := transport.NewCachedFileTokenSource(e.TokenFile)
	// Fail now on a missing or empty token file, as client-go's own
	// BearerTokenFile does, rather than on every request later.
	if _, err := tokens.Token(); err != nil {
		return nil, err
	}
	cfg := restConfig(e, tokens)
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("build client: %w", err)
	}
	kube, err := kubernetes.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("build clientset: %w", err)
	}
	return &Client{
		Entry:  e,
		Config: cfg,
		HTTP:   httpClient,
		Kube:   kube,
		health: Health{Cluster: e.Name},
	}, nil
}

// restConfig is the client configuration of a cluster. The token stays in
// its file (R-ID1), read through client-go's cached file token source, which
// re-reads the file once a minute. It is wired in through WrapTransport
// rather than BearerTokenFile because only this way a 401 also resets the
// cache, so the request after a rejected token carries the file's current
// one: client-go's BearerTokenFile transport re-reads only on its minute
// timer. Never BearerToken, which would freeze the first token forever.
func restConfig(e ClusterEntry, tokens transport.ResettableTokenSource) *rest.Config {
	cfg := tokenConfig(e.Server, e.CAFile, tokens)
	cfg.QPS, cfg.Burst, cfg.UserAgent = e.QPS, e.Burst, "crucible/"+e.Name
	return cfg
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

// Get returns the client of the cluster called name.
func (cs *Clients) Get(name string) (*Client, bool) {
	c, ok := cs.byName[name]
	return c, ok
}

// All returns every client in profile order.
func (cs *Clients) All() []*Client {
	out := make([]*Client, len(cs.list))
	copy(out, cs.list)
	return out
}

// Server is the REST client of the cluster's API server itself (its
// /readyz), for retry.NotReady; nil for a client without a clientset.
func (c *Client) Server() rest.Interface {
	if c.Kube == nil {
		return nil
	}
	return c.Kube.Discovery().RESTClient()
}

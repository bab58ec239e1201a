// Package controller assembles crucible's hub controller: the hub identity,
// the internal listener (health, readiness, metrics; the API joins it with the
// dispatcher) and the external listener, which serves exactly the discovery
// mirror (and, with the ingest work, the drop-box) and 404 for everything else.
package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"k8s.io/client-go/rest"

	"crucible.dev/crucible/internal/httpserve"
	"crucible.dev/crucible/internal/metrics"
	"crucible.dev/crucible/internal/mirror"
)

// Config is what the controller needs to run.
type Config struct {
	Hub      HubConfig
	Internal ListenerConfig
	External ListenerConfig
	// ExternalURL is the external listener's base URL as spokes reach it; the
	// mirror points jwks_uri below it.
	ExternalURL string
	Mirror      MirrorConfig
}

// HubConfig says how the controller reaches its own cluster's API. Empty
// Server means in-cluster: the pod's service-account token file and CA.
type HubConfig struct {
	Server string
	CAFile string
	// TokenFile is the controller's projected service-account token for the
	// hub's own audience. client-go re-reads it, so rotation needs no restart.
	TokenFile string
}

// ListenerConfig is one listener; plain HTTP only on loopback.
type ListenerConfig struct {
	Listen          string
	TLSCert, TLSKey string
	InsecureHTTP    bool
}

// MirrorConfig tunes the discovery mirror; zero values take its defaults.
type MirrorConfig struct {
	TTL, MaxStale time.Duration
}

// Validate reports every problem with c at once.
func (c Config) Validate() error {
	var errs []error
	if c.Hub.Server != "" && c.Hub.TokenFile == "" {
		errs = append(errs, errors.New("hub.tokenFile: required when hub.server is set (the controller has no other credential)"))
	}
	if c.Internal.Listen == "" {
		errs = append(errs, errors.New("internal.listen: required"))
	}
	if c.External.Listen == "" {
		errs = append(errs, errors.New("external.listen: required"))
	}
	if c.ExternalURL == "" {
		errs = append(errs, errors.New("externalURL: required (the URL spokes reach the external listener at)"))
	}
	return errors.Join(errs...)
}

// hubRESTConfig builds the controller's client config for the hub. The token
// is referenced by file, never read into a string here.
func (h HubConfig) restConfig() (*rest.Config, error) {
	if h.Server == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("hub: no server configured and not in a cluster: %w", err)
		}
		return cfg, nil
	}
	return &rest.Config{
		Host:            h.Server,
		TLSClientConfig: rest.TLSClientConfig{CAFile: h.CAFile},
		BearerTokenFile: h.TokenFile,
	}, nil
}

// Run serves until ctx ends.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("invalid controller config: %w", err)
	}
	hubCfg, err := cfg.Hub.restConfig()
	if err != nil {
		return err
	}
	hubHTTP, err := rest.HTTPClientFor(hubCfg)
	if err != nil {
		return fmt.Errorf("hub client: %w", err)
	}
	m, err := mirror.New(mirror.Options{
		Upstream:    hubHTTP,
		UpstreamURL: hubCfg.Host,
		ExternalURL: cfg.ExternalURL,
		TTL:         cfg.Mirror.TTL,
		MaxStale:    cfg.Mirror.MaxStale,
		Logger:      log.With("component", "mirror"),
	})
	if err != nil {
		return fmt.Errorf("discovery mirror: %w", err)
	}

	internal := http.NewServeMux()
	internal.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	internal.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := m.Check(r.Context()); err != nil {
			log.Warn("not ready", "error", err)
			http.Error(w, "mirror: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	internal.Handle("GET /metrics", metrics.Handler())

	// Either listener failing stops the other: a controller with half its
	// routes is worse than one that restarts.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 2)
	go func() {
		errc <- httpserve.ListenAndServe(ctx, httpserve.Options{
			Name: "internal", Addr: cfg.Internal.Listen, CertFile: cfg.Internal.TLSCert, KeyFile: cfg.Internal.TLSKey,
			InsecureHTTP: cfg.Internal.InsecureHTTP, WriteTimeout: 0,
		}, internal, log)
	}()
	go func() {
		// The external listener is the internet-facing route: only the mirror
		// (which answers 404 for every other path).
		errc <- httpserve.ListenAndServe(ctx, httpserve.Options{
			Name: "external", Addr: cfg.External.Listen, CertFile: cfg.External.TLSCert, KeyFile: cfg.External.TLSKey,
			InsecureHTTP: cfg.External.InsecureHTTP, WriteTimeout: time.Minute,
		}, m, log)
	}()
	first := <-errc
	cancel()
	return errors.Join(first, <-errc)
}

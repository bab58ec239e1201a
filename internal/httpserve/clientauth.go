package httpserve

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"crucible.dev/crucible/internal/certpool"
	"crucible.dev/crucible/internal/reload"
)

// ErrClientNotAllowed means a client certificate that chains to the client
// CA but names none of the allowed clients.
var ErrClientNotAllowed = errors.New("client certificate names no allowed client")

// requireClientCerts makes every handshake of base require a client
// certificate that chains to a CA in caFile and, if names is not empty, whose
// subject CN or one of whose DNS SANs is in names. The check is at the TLS
// layer, so a client without one never reaches a handler. The CA file is
// re-read when it changes, as the serving certificate is; a broken file
// keeps the previous pool.
func requireClientCerts(base *tls.Config, caFile string, names []string, log *slog.Logger) error {
	// Set before clientCerts: each handshake runs on a copy of base.
	base.VerifyConnection = clientNamed(names)
	return clientCerts(base, caFile, tls.RequireAndVerifyClientCert, log)
}

// askClientCerts makes every handshake of base ask for a client
// certificate and verify one that is given against caFile (re-read as
// requireClientCerts re-reads it) and, if names is not empty, against
// names as requireClientCerts does. A client without one is served, and
// the handler tells the two apart by the request's verified chains: the
// API's SSO proxy must prove itself, its browsers and probes need not.
func askClientCerts(base *tls.Config, caFile string, names []string, log *slog.Logger) error {
	base.VerifyConnection = clientNamed(names)
	return clientCerts(base, caFile, tls.VerifyClientCertIfGiven, log)
}

// clientNamed is the handshake's check that a client certificate names
// one of names (its subject CN or a DNS SAN); with no names, or no
// certificate, it passes: the client CA is checked by the TLS stack, and
// whether a certificate was required by the mode.
func clientNamed(names []string) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(names) == 0 || len(cs.PeerCertificates) == 0 {
			return nil
		}
		leaf := cs.PeerCertificates[0]
		if slices.Contains(names, leaf.Subject.CommonName) || slices.ContainsFunc(leaf.DNSNames, func(n string) bool { return slices.Contains(names, n) }) {
			return nil
		}
		return fmt.Errorf("%w: CN %q", ErrClientNotAllowed, leaf.Subject.CommonName)
	}
}

// clientCerts sets base's client authentication to mode with the pool of
// caFile, loaded now and re-read per handshake when the file changed.
func clientCerts(base *tls.Config, caFile string, mode tls.ClientAuthType, log *slog.Logger) error {
	cas := &clientCAs{file: caFile, log: log}
	if _, err := cas.get(); err != nil {
		return err
	}
	base.ClientAuth = mode
	// Each handshake gets a copy of base with the current pool. base must
	// name its protocols itself: http.Server adds h2 and http/1.1 only to
	// the config it was given, not to the one returned here.
	if len(base.NextProtos) == 0 {
		base.NextProtos = []string{"h2", "http/1.1"}
	}
	perConn := base.Clone()
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		pool, err := cas.get()
		if err != nil {
			return nil, err
		}
		cfg := perConn.Clone()
		cfg.ClientCAs = pool
		return cfg, nil
	}
	return nil
}

// clientCAs loads the client CA bundle and reloads it when the file's size or
// modification time changes.
type clientCAs struct {
	file string
	log  *slog.Logger

	mu      sync.Mutex
	stamp   reload.FileStat
	current *x509.CertPool
}

func (c *clientCAs) get() (*x509.CertPool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	stamp, err := reload.Stat(c.file)
	if err == nil {
		if stamp == c.stamp && c.current != nil {
			return c.current, nil
		}
		c.stamp = stamp // a broken file is retried when it changes again
	}
	var pool *x509.CertPool
	if err == nil {
		pool, err = certpool.Load(c.file)
	}
	switch {
	case err == nil:
		c.current = pool
	case c.current == nil:
		return nil, fmt.Errorf("load client CA: %w", err)
	default:
		c.log.Warn("client CA not reloaded; keeping the previous one", "file", c.file, "error", err)
	}
	return c.current, nil
}

// Package httpserve runs crucible's HTTPS listeners: a serving certificate
// re-read when its files change (so renewals need no restart), plain HTTP only
// on loopback and only when asked for, a graceful shutdown when the context
// ends, and the Host allowlist (RequireHost) that keeps DNS-rebinding pages
// off the plain-HTTP listeners no identity guards.
package httpserve

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"crucible.dev/crucible/internal/reload"
	"crucible.dev/crucible/internal/urlcheck"
)

// shutdownTimeout bounds how long requests in flight may finish after the
// context ends.
const shutdownTimeout = 10 * time.Second

// Read bounds: the request line and headers always, the whole request
// (body included) unless Options.NoReadTimeout. Variables so tests can
// shorten them.
var (
	readHeaderTimeout = 10 * time.Second
	readTimeout       = 30 * time.Second
)

// Options say where and how a listener listens.
type Options struct {
	// Name says which listener this is, in logs and errors.
	Name string
	// Addr is host:port to listen on.
	Addr string
	// CertFile and KeyFile are the serving certificate (chain) and key, PEM.
	// They are re-read when either file changes, so a renewed certificate is
	// used without a restart.
	CertFile, KeyFile string
	// InsecureHTTP serves plain HTTP instead; allowed only on a loopback
	// address, for local testing.
	InsecureHTTP bool
	// WriteTimeout bounds writing one response; zero means none (streams).
	WriteTimeout time.Duration
	// ClientCAFile, with TLS, requires every client to present a
	// certificate chaining to a CA in this PEM file (re-read when it
	// changes); ClientNames, if set, also requires its CN or a DNS SAN to be
	// one of them. Clients without one are refused in the handshake.
	ClientCAFile string
	ClientNames  []string
	// AskClientCAFile, with TLS, asks every client for a certificate and
	// verifies one it is given against this PEM file (re-read when it
	// changes) and ClientNames; a client without one is still served, and
	// a handler finds the verified chain in r.TLS. Excludes ClientCAFile.
	AskClientCAFile string
	// NoCredentials marks a listener that never receives a credential (the
	// webhook's metrics): plain HTTP is then allowed on any address.
	NoCredentials bool
	// NoReadTimeout drops the 30-second bound on reading a whole request,
	// for a listener whose handlers bound slow bodies themselves: the
	// drop-box enforces a minimum transfer rate instead, so a large upload
	// over a slow link is not cut while it makes progress. Headers stay
	// bounded.
	NoReadTimeout bool
}

// ListenAndServe serves h until ctx ends, then shuts down gracefully.
func ListenAndServe(ctx context.Context, opts Options, h http.Handler, log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	srv := newServer(opts, h, log)
	if err := configureTLS(srv, opts, log); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", opts.Addr)
	if err != nil {
		return fmt.Errorf("%s listener: listen on %s: %w", opts.Name, opts.Addr, err)
	}
	log.Info("serving", "listener", opts.Name, "address", ln.Addr().String(), "tls", !opts.InsecureHTTP)

	errc := make(chan error, 1)
	go func() {
		if opts.InsecureHTTP {
			errc <- srv.Serve(ln)
		} else {
			errc <- srv.ServeTLS(ln, "", "")
		}
	}()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shut down: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// newServer is the http.Server of a listener, before TLS.
func newServer(opts Options, h http.Handler, log *slog.Logger) *http.Server {
	srv := &http.Server{
		Handler:           h,
		ConnContext:       withConn,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      opts.WriteTimeout,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	if opts.NoReadTimeout {
		srv.ReadTimeout = 0
	}
	return srv
}

// Validate checks the options without touching files or the network, so a
// command can refuse bad flags before it starts anything.
func (o Options) Validate() error {
	if o.InsecureHTTP {
		switch {
		case o.CertFile != "" || o.KeyFile != "":
			return errors.New("a TLS certificate and plain HTTP exclude each other")
		case o.ClientCAFile != "" || o.AskClientCAFile != "":
			return errors.New("client certificates need TLS, not plain HTTP")
		case o.NoCredentials:
			return nil
		}
		return requireLoopback(o.Addr)
	}
	if len(o.ClientNames) > 0 && o.ClientCAFile == "" && o.AskClientCAFile == "" {
		return errors.New("allowed client names need a client CA")
	}
	if o.ClientCAFile != "" && o.AskClientCAFile != "" {
		return errors.New("a required and an optional client CA exclude each other")
	}
	if o.CertFile == "" || o.KeyFile == "" {
		return errors.New("a TLS certificate and key are required (plain HTTP only on loopback, when asked for explicitly)")
	}
	return nil
}

func configureTLS(srv *http.Server, opts Options, log *slog.Logger) error {
	if err := opts.Validate(); err != nil || opts.InsecureHTTP {
		return err
	}
	certs := &certFiles{certFile: opts.CertFile, keyFile: opts.KeyFile, log: log}
	if _, err := certs.get(nil); err != nil {
		return err
	}
	srv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: certs.get}
	switch {
	case opts.ClientCAFile != "":
		return requireClientCerts(srv.TLSConfig, opts.ClientCAFile, opts.ClientNames, log)
	case opts.AskClientCAFile != "":
		return askClientCerts(srv.TLSConfig, opts.AskClientCAFile, opts.ClientNames, log)
	}
	return nil
}

// requireLoopback refuses plain HTTP on anything but a loopback address:
// kube-apiserver would send tokens over it.
func requireLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen address %q: %w", addr, err)
	}
	if !urlcheck.LoopbackHost(host) {
		return fmt.Errorf("plain HTTP is only allowed on a loopback address, not %q", addr)
	}
	return nil
}

// certFiles loads the serving certificate and reloads it when either file's
// size or modification time changes; a broken pair keeps the previous one.
type certFiles struct {
	certFile, keyFile string
	log               *slog.Logger

	mu      sync.Mutex
	stamp   [2]reload.FileStat
	current *tls.Certificate
}

func (c *certFiles) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	stamp, err := c.stat()
	if err == nil && stamp == c.stamp && c.current != nil {
		return c.current, nil
	}
	var cert tls.Certificate
	if err == nil {
		c.stamp = stamp // a broken pair is retried when the files change again
		cert, err = tls.LoadX509KeyPair(c.certFile, c.keyFile)
	}
	switch {
	case err == nil:
		c.current = &cert
	case c.current == nil:
		return nil, fmt.Errorf("load serving certificate: %w", err)
	default:
		c.log.Warn("serving certificate not reloaded; keeping the previous one", "cert", c.certFile, "error", err)
	}
	return c.current, nil
}

func (c *certFiles) stat() ([2]reload.FileStat, error) {
	var stamp [2]reload.FileStat
	for i, path := range []string{c.certFile, c.keyFile} {
		st, err := reload.Stat(path)
		if err != nil {
			return stamp, err
		}
		stamp[i] = st
	}
	return stamp, nil
}

// connKey carries a request's connection in its context (ConnContext), for
// a handler that tunes its own socket: LimitSendBuffer.
type connKey struct{}

func withConn(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// LimitSendBuffer sets the kernel's send buffer of r's connection to bytes
// (which Linux doubles for its bookkeeping) and reports whether it could:
// only when the request owns its connection, HTTP/1.x over TCP with TLS or
// without, on a server this package made. An HTTP/2 request shares its
// connection with others, which a bound meant for one would slow.
//
// Left alone, Linux grows a connection's send buffer up to
// net.ipv4.tcp_wmem's maximum (4 MiB by default) for a client that does not
// read: a long stream to a hundred stalled viewers would make the kernel
// hold hundreds of MiB the controller wrote and nobody took, and the
// controller spend the CPU copying them in.
func LimitSendBuffer(r *http.Request, bytes int) bool {
	if r.ProtoMajor != 1 {
		return false
	}
	c, _ := r.Context().Value(connKey{}).(net.Conn)
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	tcp, ok := c.(*net.TCPConn)
	return ok && tcp.SetWriteBuffer(bytes) == nil
}

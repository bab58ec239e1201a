package devstack

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"crucible.dev/crucible/internal/certpool"
)

// The runtime answers the kubelet API's containerLogs (and portForward, see
// portforward.go) on the kubelet port
// every node of the spoke names (their daemonEndpoints), so that the spoke's kube-apiserver serves
// pods/log — follow, timestamps, sinceTime, tailLines and limitBytes
// included — from the pod's own CRI log, as it would from a kubelet.

// newLogServer serves the node's kubelet port. Only clients with a
// certificate from the stack's CA (the API servers' kubelet client) may read
// logs; /healthz is open.
func (r *nodeRuntime) newLogServer(certFile, keyFile, caFile string) (*http.Server, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("load serving certificate: %w", err)
	}
	pool, err := certpool.Load(caFile)
	if err != nil {
		return nil, fmt.Errorf("stack CA: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", r.serveContainerLogs)
	for _, route := range []string{"GET /portForward/{namespace}/{pod}", "POST /portForward/{namespace}/{pod}",
		"GET /portForward/{namespace}/{pod}/{uid}", "POST /portForward/{namespace}/{pod}/{uid}"} {
		mux.HandleFunc(route, r.servePortForward)
	}
	return &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{
			Certificates: []tls.Certificate{cert},
			ClientCAs:    pool,
			ClientAuth:   tls.VerifyClientCertIfGiven,
			MinVersion:   tls.VersionTLS12,
		},
	}, nil
}

func (r *nodeRuntime) listenAndServe(srv *http.Server, port int) (net.Listener, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("listen on the kubelet port of %s: %w", r.spoke, err)
	}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	return ln, nil
}

func (r *nodeRuntime) serveContainerLogs(w http.ResponseWriter, req *http.Request) {
	if req.TLS == nil || len(req.TLS.VerifiedChains) == 0 {
		http.Error(w, "a client certificate from the stack's CA is required", http.StatusUnauthorized)
		return
	}
	opts, err := parseLogOptions(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ns, name, container := req.PathValue("namespace"), req.PathValue("pod"), req.PathValue("container")
	r.mu.Lock()
	if r.logRequests == nil {
		r.logRequests = map[string]int{}
	}
	r.logRequests[ns+"/"+name]++
	r.mu.Unlock()
	p := r.lookup(ns, name)
	if p == nil {
		http.Error(w, fmt.Sprintf("pod %s/%s is not running on the nodes of %s (%s)", ns, name, r.spoke, strings.Join(r.nodes, ", ")), http.StatusNotFound)
		return
	}
	if container != p.container {
		http.Error(w, fmt.Sprintf("container %q in pod %s/%s: the dev runtime runs only the first container, %q", container, ns, name, p.container), http.StatusBadRequest)
		return
	}
	log := p.getLog()
	if log == nil {
		http.Error(w, fmt.Sprintf("container %q in pod %q is waiting to start: %s", container, name, p.waitingReason()), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	flush := func() {}
	if f, ok := w.(http.Flusher); ok {
		flush = f.Flush
	}
	// Errors after the header is out can only end the stream.
	_ = log.serve(req.Context(), w, flush, opts)
}

// parseLogOptions reads the query the kube-apiserver sends (see
// k8s.io/kubernetes/pkg/kubelet/server's getContainerLogs).
func parseLogOptions(req *http.Request) (logOptions, error) {
	q := req.URL.Query()
	o := logOptions{tailLines: -1}
	var err error
	if o.follow, err = boolParam(q.Get("follow")); err != nil {
		return o, fmt.Errorf("follow: %w", err)
	}
	if o.timestamps, err = boolParam(q.Get("timestamps")); err != nil {
		return o, fmt.Errorf("timestamps: %w", err)
	}
	if prev, err := boolParam(q.Get("previous")); err != nil || prev {
		return o, fmt.Errorf("previous: the dev runtime never restarts a container")
	}
	if v := q.Get("sinceTime"); v != "" {
		if o.since, err = time.Parse(time.RFC3339, v); err != nil {
			return o, fmt.Errorf("sinceTime: %w", err)
		}
	}
	if v := q.Get("sinceSeconds"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return o, fmt.Errorf("sinceSeconds: must be a positive integer")
		}
		o.since = time.Now().Add(-time.Duration(n) * time.Second)
	}
	if v := q.Get("tailLines"); v != "" {
		if o.tailLines, err = strconv.ParseInt(v, 10, 64); err != nil || o.tailLines < 0 {
			return o, fmt.Errorf("tailLines: must be a non-negative integer")
		}
	}
	if v := q.Get("limitBytes"); v != "" {
		if o.limitBytes, err = strconv.ParseInt(v, 10, 64); err != nil || o.limitBytes < 1 {
			return o, fmt.Errorf("limitBytes: must be a positive integer")
		}
	}
	return o, nil
}

func boolParam(v string) (bool, error) {
	if v == "" {
		return false, nil
	}
	return strconv.ParseBool(v)
}

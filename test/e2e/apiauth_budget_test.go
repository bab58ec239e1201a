package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"

	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
	"crucible.dev/crucible/internal/render"
	"crucible.dev/crucible/internal/testpki"
)

// TestAPIAuthBudgets runs issue 23's API budgets on a stack of its own (it
// restarts the controller with other [api] settings): in "kubernetes" mode a
// flood of garbage bearers from one address costs the hub at most the
// per-source failure budget in TokenReviews while a signed-in user behind
// the same address keeps working; TokenReviews and SubjectAccessReviews
// have client-side limits of their own; and in proxy mode with
// proxy_client_ca the identity headers count only with the proxy's client
// certificate.
func TestAPIAuthBudgets(t *testing.T) {
	t.Parallel() // a stack of its own: see doc.go
	s := ownStack(t, devstack.Options{
		Crucible: devstacktest.BuildCrucible, Spokes: []devstack.SpokeOptions{{Name: "wharf"}},
		MirrorTTL: time.Second, MirrorMaxStale: 8 * time.Second,
	})
	baseProfile, err := os.ReadFile(s.Federation.ProfileFile)
	if err != nil {
		t.Fatal(err)
	}
	base := string(baseProfile)
	applyHub(t, s, render.HubRBAC(devstack.HubNamespace, devstack.HubServiceAccount)...)
	for _, name := range []string{"viewer", "newcomer"} {
		hubServiceAccount(t, s, name)
		grant(t, s, name, render.HubViewerName, saSubject(name))
	}
	token := func(sa string) string { return hubToken(t, s, sa, devstack.Issuer) }
	viewerToken, newcomerToken := token("viewer"), token("newcomer")

	t.Run("garbage bearers cost at most the failure budget", func(t *testing.T) {
		// A refill of one failure per 1,000 s: nothing the test does after
		// the flood can wait long enough for the bucket to hold a token
		// again, however slow the machine (at 1/s a loaded CI let the
		// newcomer through).
		const rate, burst, n = 0.001, 20, 1000
		withAPISection(t, s, base, fmt.Sprintf("auth = \"kubernetes\"\nauth_failures_per_source = %v\nauth_failure_burst = %d\ntoken_accept_ttl = \"1s\"\n", rate, burst))
		const flood = "127.0.0.3"
		honest := caller{token: viewerToken, local: flood}
		honest.call(t, s, http.MethodGet, "/api/pods", nil).want(t, "the viewer signs in from the flood's address", 200)

		refusedBefore := controllerMetricValue(t, s, `crucible_budget_refusals_total{budget="api_auth_failures"}`)
		reviewsBefore := hubTokenReviews(t, s)
		start := time.Now()
		codes := map[int]int{}
		for i := range n {
			a := caller{token: fmt.Sprintf("garbage-%d", i), local: flood}.call(t, s, http.MethodGet, "/api/pods", nil)
			codes[a.code]++
			if a.code == http.StatusTooManyRequests && a.header.Get("Retry-After") == "" {
				t.Fatalf("garbage %d: 429 without Retry-After", i)
			}
		}
		elapsed := time.Since(start)
		reviews := hubTokenReviews(t, s) - reviewsBefore
		// The bucket starts full and refills at rate: no schedule can get
		// more failures through in the elapsed time the test itself saw.
		bound := burst + int(math.Floor(rate*elapsed.Seconds()))
		if reviews > bound || codes[401] > bound || codes[401]+codes[429] != n {
			t.Fatalf("%d garbage bearers in %v: %d hub TokenReviews, answers %v; want at most %d reviews and 401s, the rest 429",
				n, elapsed.Round(time.Millisecond), reviews, codes, bound)
		}
		if got := controllerMetricValue(t, s, `crucible_budget_refusals_total{budget="api_auth_failures"}`) - refusedBefore; got != float64(codes[429]) {
			t.Errorf("crucible_budget_refusals_total{budget=\"api_auth_failures\"} grew by %v, want %d", got, codes[429])
		}

		// The viewer's accept expired during the flood (1s): a token the hub
		// accepted is reviewed again whatever the budget holds.
		honest.call(t, s, http.MethodGet, "/api/pods", nil).want(t, "the signed-in viewer after the flood, same address", 200)
		// A token never seen from the flooded address waits out the flood
		// (docs/api.md); from anywhere else it is reviewed at once.
		if a := (caller{token: newcomerToken, local: flood}).call(t, s, http.MethodGet, "/api/pods", nil).want(t, "a newcomer from the flooded address", 429); a.header.Get("Retry-After") == "" {
			t.Errorf("429 without Retry-After")
		}
		caller{token: newcomerToken, local: "127.0.0.4"}.call(t, s, http.MethodGet, "/api/pods", nil).want(t, "the newcomer from another address", 200)
	})

	t.Run("reviews have client-side limits of their own", func(t *testing.T) {
		// One TokenReview, then none for 1,000 s: a review that cannot get a
		// token before its timeout is a hub that did not answer.
		withAPISection(t, s, base, "auth = \"kubernetes\"\ntoken_review_qps = 0.001\ntoken_review_burst = 1\ntoken_accept_ttl = \"5m\"\n")
		viewer := caller{token: viewerToken, local: "127.0.0.5"}
		viewer.call(t, s, http.MethodGet, "/api/pods", nil).want(t, "the viewer takes the one TokenReview", 200)
		for i := range 2 {
			a := caller{token: fmt.Sprintf("unknown-%d", i), local: "127.0.0.6"}.call(t, s, http.MethodGet, "/api/pods", nil).
				want(t, "an unknown token with the TokenReview limiter empty", 503)
			if a.header.Get("Retry-After") == "" {
				t.Errorf("503 without Retry-After")
			}
		}
		// SubjectAccessReviews the viewer has not asked yet still go out.
		viewer.call(t, s, http.MethodGet, "/api/pods?cluster=wharf", nil).want(t, "the viewer on wharf (a new SubjectAccessReview)", 200)
		viewer.call(t, s, http.MethodGet, "/api/clusters", nil).want(t, "the viewer lists clusters", 200)
	})

	t.Run("proxy mode with proof", func(t *testing.T) {
		dir := t.TempDir()
		ca := testpki.NewCA(t, "e2e-proxy-ca")
		caFile := ca.Write(t, dir, "proxy-ca.crt")
		certFile, keyFile := ca.Issue(t, "controller", testpki.Server).Write(t, dir, "internal")
		proxyCert := ca.Issue(t, "oauth2-proxy", testpki.Client).Pair(t)
		stranger := testpki.NewCA(t, "stranger").Issue(t, "oauth2-proxy", testpki.Client).Pair(t)

		profile := strings.Replace(base, "[controller]\n", fmt.Sprintf("[controller]\ninternal_tls_cert = %q\ninternal_tls_key = %q\n", certFile, keyFile), 1)
		section := fmt.Sprintf("auth = \"proxy\"\nproxy_cidrs = [\"127.0.0.2/32\"]\nproxy_client_ca = %q\n", caFile)
		grant(t, s, "alice", render.HubViewerName, rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice@example.com"})
		noCert := &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"}
		if err := os.WriteFile(s.Federation.ProfileFile, []byte(profile+"\n[api]\n"+section), 0o644); err != nil {
			t.Fatal(err)
		}
		// Ready once /readyz answers over TLS to a client without a
		// certificate: probes and browsers need none.
		ready := func(ctx context.Context) error {
			code, err := tlsGet(ctx, s, noCert, "", "/readyz", nil)
			if err == nil && code != http.StatusOK {
				err = fmt.Errorf("readyz answered %d", code)
			}
			return err
		}
		if err := s.RestartProcess(t.Context(), "crucible-controller", ready); err != nil {
			t.Fatal(err)
		}

		alice := map[string]string{"X-Auth-Request-User": "alice@example.com"}
		withCert := noCert.Clone()
		withCert.Certificates = []tls.Certificate{proxyCert}
		caller{local: "127.0.0.2", header: alice, tls: withCert}.call(t, s, http.MethodGet, "/api/pods", nil).
			want(t, "alice through the proxy with its certificate", 200)
		a := caller{local: "127.0.0.2", header: alice, tls: noCert}.call(t, s, http.MethodGet, "/api/pods", nil).
			want(t, "alice's headers from the proxy's address without a certificate", 401)
		if !strings.Contains(string(a.body), "without a verified client certificate (api.proxy_client_ca)") {
			t.Errorf("the 401 does not name the reason: %s", a.body)
		}
		caller{local: "127.0.0.1", header: alice, tls: withCert}.call(t, s, http.MethodGet, "/api/pods", nil).
			want(t, "alice's headers with the certificate from another address", 401)
		// A certificate of another CA is refused in the handshake.
		forged := noCert.Clone()
		forged.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &stranger, nil }
		if code, err := tlsGet(t.Context(), s, forged, "127.0.0.2", "/api/pods", alice); err == nil {
			t.Errorf("a client certificate of another CA: answered %d, want refused in the handshake", code)
		}
		caller{tls: noCert}.call(t, s, http.MethodGet, "/healthz", nil).want(t, "/healthz without a certificate", 200)
	})

	t.Run("proxy_client_ca without internal TLS is refused at start", func(t *testing.T) {
		// The profile without internal_tls_cert: the controller must not
		// start and trust addresses alone.
		path := t.TempDir() + "/crucible.toml"
		section := "auth = \"proxy\"\nproxy_cidrs = [\"127.0.0.2/32\"]\nproxy_client_ca = \"/nonexistent/ca.crt\"\n"
		if err := os.WriteFile(path, []byte(base+"\n[api]\n"+section), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.CommandContext(t.Context(), devstacktest.CrucibleBinary(t), "controller", "--config", path).CombinedOutput()
		if err == nil || !containsAll(string(out), "api.proxy_client_ca", "controller.internal_tls_cert") {
			t.Errorf("controller with proxy_client_ca and a plain-HTTP internal listener: %v\n%s", err, out)
		}
	})
}

// tlsGet is one GET of the internal listener over TLS with cfg, from local
// (any address when ""), returning the status or the error that stopped it
// (a refused handshake, a listener not up yet).
func tlsGet(ctx context.Context, s *devstack.Stack, cfg *tls.Config, local, path string, header map[string]string) (int, error) {
	url := strings.Replace(s.Federation.ControllerInternalURL, "http://", "https://", 1) + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	d := &net.Dialer{}
	if local != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(local)}
	}
	tr := &http.Transport{DialContext: d.DialContext, TLSClientConfig: cfg, DisableKeepAlives: true}
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// hubTokenReviews is the hub API server's own count of TokenReviews
// created, read from its /metrics with the admin identity.
func hubTokenReviews(t *testing.T, s *devstack.Stack) int {
	t.Helper()
	return apiserverMetric(t, s.Hub, "apiserver_request_total", `resource="tokenreviews"`, `verb="POST"`)
}

// controllerMetricValue is the value of the controller's sample series (a
// metric name with its labels, exactly as exposed), 0 while it is absent.
func controllerMetricValue(t *testing.T, s *devstack.Stack, series string) float64 {
	t.Helper()
	return seriesValue(t, getBody(t, t.Context(), caClientFor(t, s), s.Federation.ControllerMetricsURL+"/metrics"), series)
}

// seriesValue is the value of series (a metric name with its labels, exactly
// as exposed) in the Prometheus text body, 0 while it is absent.
func seriesValue(t *testing.T, body, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	return 0
}

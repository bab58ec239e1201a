package chaos

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"testing"
	"time"

	"crucible.dev/crucible/internal/devstack/devstacktest"
)

// slowClients is how many stalled connections each listener gets.
const slowClients = 50

// A slow client on each listener — connections that send half a request (or
// half nothing of a TLS handshake) and stall — does not delay other
// requests: each listener answers an ordinary request while its slow clients
// are still connected. A server that handled connections one at a time, or
// behind a shared lock held while reading, would answer only after they
// were cut (its header timeout), so the check fails.
func TestChaos12SlowClients(t *testing.T) {
	s := devstacktest.Shared(t)
	ctx := t.Context()
	c := newClient(s)
	pool := x509.NewCertPool()
	pem, err := os.ReadFile(s.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool.AppendCertsFromPEM(pem)
	tlsClient := &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	t.Cleanup(tlsClient.CloseIdleConnections)
	getOK := func(cl *http.Client, u string) func(context.Context) error {
		return func(ctx context.Context) error {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
			if err != nil {
				return err
			}
			resp, err := cl.Do(req)
			c.count(statusOf(resp), err)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("GET %s: %s", u, resp.Status)
			}
			return nil
		}
	}
	f := s.Federation
	listeners := []struct {
		name, url string
		tls       bool
		ordinary  func(context.Context) error
	}{
		{"controller internal (API)", f.ControllerInternalURL, false, func(ctx context.Context) error {
			code, _, body, err := c.do(ctx, http.MethodGet, "/api/pods?limit=1", nil)
			if err == nil && code != http.StatusOK {
				err = fmt.Errorf("list: %d %s", code, body)
			}
			return err
		}},
		{"controller external (mirror, drop-box)", f.ControllerExternalURL, true, getOK(tlsClient, f.ControllerExternalURL+"/.well-known/openid-configuration")},
		{"controller metrics", f.ControllerMetricsURL, false, getOK(http.DefaultClient, f.ControllerMetricsURL+"/metrics")},
		{"wharf webhook", f.WebhookURLs["wharf"], true, func(ctx context.Context) error {
			err := s.WebhookReady("wharf")(ctx) // over mTLS, as wharf's kube-apiserver
			c.count(http.StatusOK, err)
			return err
		}},
		{"wharf webhook operations", f.WebhookMetricsURLs["wharf"], false, getOK(http.DefaultClient, f.WebhookMetricsURLs["wharf"]+"/readyz")},
	}
	var problems []string
	began := time.Now()
	for _, l := range listeners {
		u, err := url.Parse(l.url)
		if err != nil {
			t.Fatal(err)
		}
		conns := stall(t, u.Host, l.tls)
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		err = l.ordinary(rctx)
		cancel()
		open := stillOpen(conns)
		t.Logf("%s: ordinary request %v with %d of %d slow clients still connected", l.name, err, open, len(conns))
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: the ordinary request failed beside %d slow clients: %v", l.name, len(conns), err))
		} else if open < len(conns)/2 {
			problems = append(problems, fmt.Sprintf("%s: answered only after %d of %d slow clients were cut", l.name, len(conns)-open, len(conns)))
		}
		for _, cn := range conns {
			_ = cn.Close()
		}
	}
	res := result{
		Num: 12, Scenario: "12 (S). a slow client on each listener", Seed: cfg.Seed, Faults: len(listeners) * slowClients,
		Injected: fmt.Sprintf("%d stalled connections (half a request line; no TLS ClientHello) on each of the controller's internal, external and metrics listeners and wharf's webhook and its operations listener", slowClients),
		Load:     "one ordinary request per listener while its slow clients hold their connections",
		Expected: "every ordinary request answered while at least half the slow clients are still connected",
		Requests: c.statuses(), Problems: problems, Passed: len(problems) == 0, Happened: "as expected",
		Duration: time.Since(began).Round(time.Second).String(),
	}
	if !res.Passed {
		res.Happened = fmt.Sprintf("FAILED: %d problems", len(problems))
	}
	record(res)
	for _, p := range problems {
		t.Error(p)
	}
}

func statusOf(resp *http.Response) int {
	if resp == nil {
		return 0
	}
	return resp.StatusCode
}

// stall opens slowClients connections to addr that stop half-way: for a
// plain listener after half a request line, for TLS before the ClientHello.
func stall(t *testing.T, addr string, isTLS bool) []net.Conn {
	t.Helper()
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			_ = c.Close()
		}
	})
	for range slowClients {
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			t.Fatalf("dial %s: %v", addr, err)
		}
		conns = append(conns, c)
		if !isTLS {
			if _, err := c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: slow\r\nX-Slow: ")); err != nil {
				t.Fatalf("write to %s: %v", addr, err)
			}
		}
	}
	return conns
}

// stillOpen counts the connections the server has not closed: a read that
// times out means open; EOF or a reset means closed.
func stillOpen(conns []net.Conn) int {
	n := 0
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		_, err := c.Read(make([]byte, 1))
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			n++
		}
	}
	return n
}

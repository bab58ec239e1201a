package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
)

// load is the result of one measured run.
type load struct {
	rps      float64
	p50, p99 time.Duration
	failed   int64
}

// drive sends len(tokens) requests from workers goroutines over one HTTP/2
// connection and measures them. Every request must succeed: a failed
// authentication would measure the wrong path.
func drive(ctx context.Context, client *http.Client, url string, body func(token string) []byte, tokens []string, workers int) load {
	lat := make([]time.Duration, len(tokens))
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(tokens) || ctx.Err() != nil {
					return
				}
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body(tokens[i])))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+tokens[i])
				t0 := time.Now()
				resp, err := client.Do(req)
				lat[i] = time.Since(t0)
				if err != nil {
					failed.Add(1)
					continue
				}
				var buf bytes.Buffer
				_, _ = buf.ReadFrom(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK ||
					!bytes.Contains(buf.Bytes(), []byte(controllerUser)) {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	slices.Sort(lat)
	return load{
		rps:    float64(len(tokens)) / elapsed.Seconds(),
		p50:    lat[len(lat)/2],
		p99:    lat[len(lat)*99/100],
		failed: failed.Load(),
	}
}

func http2Client(t testing.TB, caFile string) *http.Client {
	t.Helper()
	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 1,
	}}
}

// BenchmarkAuthnWebhookVsBuiltin compares, in one run on one machine, hub
// tokens authenticated by a spoke through crucible's webhook against a spoke
// whose own kube-apiserver validates the same tokens with its built-in JWT
// authenticator (keys from the same mirror). The webhook hop is the only
// difference. Reported: both rates, their ratio, latencies, and the
// webhook's own TokenReview rate called directly.
func BenchmarkAuthnWebhookVsBuiltin(b *testing.B) {
	const workers, n = 32, 3000
	s := devstacktest.Start(b, devstack.Options{
		Crucible: devstacktest.CrucibleBinary(b),
		Spokes: []devstack.SpokeOptions{
			{Name: "wharf"},
			{Name: "builtin", Issuer: "https://builtin.spoke.invalid", BuiltinHubAuthn: true},
		},
	})
	wharf, builtin := s.Spoke("wharf"), s.Spoke("builtin")
	key := s.Hub.ServiceAccountKey.Key
	mint := func(i int) string {
		c := hubClaims(devstack.HubSubject, "wharf", "builtin")
		c["jti"] = fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), i)
		return forged{claims: c}.signRS256(b, key)
	}
	ctx := b.Context()
	client := http2Client(b, s.CAFile)
	// The webhook answers only the client certificate of wharf's kube-apiserver.
	kp := s.Federation.WebhookClientCerts["wharf"]
	apiserverCert, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		b.Fatal(err)
	}
	apiserverClient := certClient(b, s, &apiserverCert)
	ssr := func(string) []byte {
		return []byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`)
	}
	ssrURL := func(c *devstack.Cluster) string {
		return c.Server + "/apis/authentication.k8s.io/v1/selfsubjectreviews"
	}

	// The built-in authenticator initialises in the background: wait for it.
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := whoami(ctx, s, builtin, mint(-1))
		return err == nil && got == controllerUser, nil
	}); err != nil {
		b.Fatalf("builtin spoke never accepted hub tokens: %v", err)
	}

	distinct := func() []string {
		ts := make([]string, n)
		for i := range ts {
			ts[i] = mint(i)
		}
		return ts
	}
	repeated := func() []string {
		one := mint(n)
		ts := make([]string, n)
		for i := range ts {
			ts[i] = one
		}
		return ts
	}
	// Both paths see the same token set; kube-apiserver caches answers per
	// token (10s success cache), so every round mints a fresh set. Rounds
	// alternate which path goes first and each path keeps its best round, so
	// neither is favoured by a noisy neighbour or by going second.
	measure := func(tokens func() []string) (hook, built load) {
		for round := range 2 {
			set := tokens()
			var h, bl load
			if round%2 == 0 {
				h = drive(ctx, client, ssrURL(wharf), ssr, set, workers)
				bl = drive(ctx, client, ssrURL(builtin), ssr, set, workers)
			} else {
				bl = drive(ctx, client, ssrURL(builtin), ssr, set, workers)
				h = drive(ctx, client, ssrURL(wharf), ssr, set, workers)
			}
			hook, built = best(hook, h), best(built, bl)
		}
		return hook, built
	}
	b.ResetTimer()
	for range b.N {
		hookD, builtD := measure(distinct)
		hookR, builtR := measure(repeated)
		review := func(tok string) []byte {
			return []byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":"` + tok + `","audiences":["https://kubernetes.default.svc"]}}`)
		}
		direct := drive(ctx, apiserverClient, s.Federation.WebhookURLs["wharf"]+"/authenticate", review, distinct(), workers)
		for name, l := range map[string]load{"webhook distinct": hookD, "builtin distinct": builtD, "webhook repeated": hookR, "builtin repeated": builtR, "webhook direct": direct} {
			if l.failed > 0 {
				b.Fatalf("%s: %d of %d requests failed", name, l.failed, n)
			}
			b.Logf("%-17s %7.0f req/s  p50 %6.1fms  p99 %6.1fms", name, l.rps, ms(l.p50), ms(l.p99))
		}
		b.ReportMetric(hookD.rps, "webhook-distinct-req/s")
		b.ReportMetric(builtD.rps, "builtin-distinct-req/s")
		b.ReportMetric(hookD.rps/builtD.rps, "ratio-distinct")
		b.ReportMetric(hookR.rps/builtR.rps, "ratio-repeated")
		b.ReportMetric(ms(hookD.p99), "webhook-distinct-p99-ms")
		b.ReportMetric(ms(builtD.p99), "builtin-distinct-p99-ms")
		b.ReportMetric(direct.rps, "webhook-direct-reviews/s")
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// best keeps the faster of two runs; failures are never hidden.
func best(a, b load) load {
	if a.rps >= b.rps {
		a.failed += b.failed
		return a
	}
	b.failed += a.failed
	return b
}

package jwt

import (
	"context"
	"crypto"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	testingclock "k8s.io/utils/clock/testing"

	"crucible.dev/crucible/internal/jwt/jwttest"
)

// jwksServer is an issuer's JWKS endpoint on a real TLS server.
type jwksServer struct {
	srv     *httptest.Server
	fetches atomic.Int64

	mu        sync.Mutex
	published []jose.JSONWebKey
	fail      bool
	gate      chan struct{} // when non-nil, fetches wait for it to close
}

func newJWKSServer(t testing.TB, keys ...jose.JSONWebKey) *jwksServer {
	t.Helper()
	s := &jwksServer{published: keys}
	s.srv = httptest.NewTLSServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *jwksServer) serve(w http.ResponseWriter, r *http.Request) {
	s.fetches.Add(1)
	s.mu.Lock()
	gate, fail, keys := s.gate, s.fail, s.published
	s.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-r.Context().Done():
			return
		}
	}
	if fail {
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: keys})
}

func (s *jwksServer) set(f func(s *jwksServer)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

// fetch reads the keys the way the webhook and the drop-box do: GET, a
// size bound, UsableKeys.
func (s *jwksServer) fetch(ctx context.Context) ([]jose.JSONWebKey, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.srv.URL, nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.srv.Client().Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET jwks: %s", resp.Status)
	}
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&set); err != nil {
		return nil, err
	}
	keys, _ := UsableKeys(set.Keys)
	return keys, nil
}

// fixture is a KeySet over a jwksServer with a fake clock.
type fixture struct {
	srv   *jwksServer
	clock *testingclock.FakeClock
	ks    *KeySet
}

func newFixture(t testing.TB, grace time.Duration, keys ...jose.JSONWebKey) *fixture {
	t.Helper()
	f := &fixture{srv: newJWKSServer(t, keys...), clock: testingclock.NewFakeClock(time.Unix(1_800_000_000, 0))}
	f.ks = NewKeySet(KeySetOptions{Fetch: f.srv.fetch, MinRefresh: 10 * time.Second, UnknownKidGrace: grace, Now: f.clock.Now})
	return f
}

// claims are a plausible service-account token's claims.
func claims() map[string]any {
	return map[string]any{"iss": "https://kubernetes.default.svc", "sub": "system:serviceaccount:ns:sa", "aud": "x", "exp": 1_900_000_000}
}

func rsaKey(i int) crypto.Signer { return jwttest.RSAKeys()[i] }

// token signs claims() with RSA key i under kid.
func token(t testing.TB, i int, kid string) string {
	t.Helper()
	return jwttest.Sign(t, jwttest.RSAKeys()[i], jose.RS256, kid, claims(), nil)
}

package webhook

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	authv1 "k8s.io/api/authentication/v1"
	testingclock "k8s.io/utils/clock/testing"

	"crucible.dev/crucible/internal/jwt/jwttest"
)

const (
	hubIssuer     = "https://kubernetes.default.svc"
	controllerSub = "system:serviceaccount:crucible:crucible-controller"
	hubAudience   = "wharf"
	v1            = "authentication.k8s.io/v1"
	v1beta1       = "authentication.k8s.io/v1beta1"
)

// testKeys are shared with the other token tests.
var testKeys = jwttest.RSAKeys

// testIssuer is a hub as the webhook sees it: a real TLS server with a
// discovery document and a JWKS, and the private keys to sign tokens.
type testIssuer struct {
	srv *httptest.Server

	mu           sync.Mutex
	issuer       string                   // served as the discovery document's issuer
	published    map[string]crypto.Signer // kid → key, in the JWKS
	discoveryOff bool
	jwksOff      bool

	jwksFetches atomic.Int64
}

func newTestIssuer(t testing.TB) *testIssuer {
	t.Helper()
	ti := &testIssuer{issuer: hubIssuer, published: map[string]crypto.Signer{"k1": testKeys()[0]}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", ti.serveDiscovery)
	mux.HandleFunc("GET /openid/v1/jwks", ti.serveJWKS)
	ti.srv = httptest.NewTLSServer(mux)
	t.Cleanup(ti.srv.Close)
	return ti
}

func (ti *testIssuer) serveDiscovery(w http.ResponseWriter, _ *http.Request) {
	ti.mu.Lock()
	defer ti.mu.Unlock()
	if ti.discoveryOff {
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]string{"issuer": ti.issuer, "jwks_uri": ti.srv.URL + "/openid/v1/jwks"})
}

func (ti *testIssuer) serveJWKS(w http.ResponseWriter, _ *http.Request) {
	ti.jwksFetches.Add(1)
	ti.mu.Lock()
	defer ti.mu.Unlock()
	if ti.jwksOff {
		http.Error(w, "down", http.StatusInternalServerError)
		return
	}
	var set jose.JSONWebKeySet
	for kid, key := range ti.published {
		alg := jose.RS256
		if _, ec := key.(*ecdsa.PrivateKey); ec {
			alg = "" // any ES* matching the curve
		}
		set.Keys = append(set.Keys, jwttest.PublicJWK(key, kid, alg))
	}
	w.Header().Set("Content-Type", "application/jwk-set+json")
	_ = json.NewEncoder(w).Encode(set)
}

func (ti *testIssuer) set(f func(ti *testIssuer)) {
	ti.mu.Lock()
	defer ti.mu.Unlock()
	f(ti)
}

func (ti *testIssuer) discoveryURL() string {
	return ti.srv.URL + "/.well-known/openid-configuration"
}

func (ti *testIssuer) caPEM() string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ti.srv.Certificate().Raw}))
}

// hubClaims are the claims of a projected token of the hub controller.
func hubClaims() map[string]any {
	now := time.Now()
	return map[string]any{
		"iss": hubIssuer,
		"sub": controllerSub,
		"aud": []string{hubAudience},
		"iat": now.Unix(),
		"nbf": now.Unix(),
		"exp": now.Add(time.Hour).Unix(),
		"jti": "4c1a0a57-0d7a-4d8e-9a8f-2f1c2b0d6a11",
		"kubernetes.io": map[string]any{
			"namespace":      "crucible",
			"serviceaccount": map[string]string{"name": "crucible-controller", "uid": "5e6f"},
		},
	}
}

// with returns claims with changes applied; a nil value deletes the claim.
func with(claims map[string]any, changes map[string]any) map[string]any {
	for k, v := range changes {
		if v == nil {
			delete(claims, k)
			continue
		}
		claims[k] = v
	}
	return claims
}

// hubToken is a valid token signed with the published key k1.
func hubToken(t testing.TB, claims map[string]any) string {
	t.Helper()
	return jwttest.Sign(t, testKeys()[0], jose.RS256, "k1", claims, nil)
}

// testProvider parameterises the hub provider in a test config.
type testProvider struct {
	subjects []string
	prefix   string
	grace    string // unknownKeyIDGrace; "" leaves it out
}

func defaultProvider() testProvider {
	return testProvider{subjects: []string{controllerSub}, prefix: "hub:"}
}

// configYAML is a config with one provider, the hub, reached through ti.
func configYAML(ti *testIssuer, p testProvider) string {
	subjects, _ := json.Marshal(p.subjects)
	return fmt.Sprintf(`jwksMinRefreshInterval: 10s
providers:
- name: hub
  allowedSubjects: %s
  issuer:
    url: %s
    discoveryURL: %s
    certificateAuthority: %s
    audiences: [%s]
  claimValidationRules:
  - expression: "claims.sub.startsWith('system:serviceaccount:')"
    message: only service accounts
  claimMappings:
    username: {claim: sub, prefix: %s}
    extra:
    - key: crucible.dev/hub-namespace
      valueExpression: "claims['kubernetes.io'].namespace"
%s`, subjects, hubIssuer, ti.discoveryURL(), strconv.Quote(ti.caPEM()), hubAudience, strconv.Quote(p.prefix), graceYAML(p.grace))
}

func graceYAML(grace string) string {
	if grace == "" {
		return ""
	}
	return "  unknownKeyIDGrace: " + grace + "\n"
}

// syncBuffer collects logs from concurrent handlers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// fixture is a Server for one test issuer, with a fake clock and captured logs.
type fixture struct {
	iss   *testIssuer
	clock *testingclock.FakeClock
	logs  *syncBuffer
	srv   *Server
	h     http.Handler
}

func newFixture(t testing.TB, p testProvider) *fixture {
	t.Helper()
	iss := newTestIssuer(t)
	cfg, err := ParseConfig([]byte(configYAML(iss, p)))
	if err != nil {
		t.Fatalf("parse config: %v", err)
	}
	return newFixtureFor(t, iss, cfg)
}

func newFixtureFor(t testing.TB, iss *testIssuer, cfg *Config) *fixture {
	t.Helper()
	f := &fixture{iss: iss, clock: testingclock.NewFakeClock(time.Now()), logs: &syncBuffer{}}
	srv, err := NewServer(t.Context(), cfg, Options{Logger: slog.New(slog.NewTextHandler(f.logs, nil)), now: f.clock.Now})
	if err != nil {
		t.Fatalf("new server: %v", err)
	}
	f.srv, f.h = srv, srv.Handler()
	return f
}

// review posts a TokenReview and returns the decoded answer, failing the
// test on anything but a 200 TokenReview in the request's apiVersion.
func (f *fixture) review(t testing.TB, apiVersion, token string) authv1.TokenReviewStatus {
	t.Helper()
	status, err := f.tryReview(apiVersion, token)
	if err != nil {
		t.Fatal(err)
	}
	return status
}

// tryReview is review for goroutines, which must not call t.Fatal.
func (f *fixture) tryReview(apiVersion, token string) (authv1.TokenReviewStatus, error) {
	req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(reviewBody(apiVersion, token)))
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	body := rec.Body.Bytes()
	if rec.Code != http.StatusOK {
		return authv1.TokenReviewStatus{}, fmt.Errorf("review: status %d: %s", rec.Code, body)
	}
	var answer authv1.TokenReview
	if err := json.Unmarshal(body, &answer); err != nil {
		return authv1.TokenReviewStatus{}, fmt.Errorf("decode answer %s: %w", body, err)
	}
	if answer.APIVersion != apiVersion || answer.Kind != "TokenReview" {
		return authv1.TokenReviewStatus{}, fmt.Errorf("answer is %s %s, want %s TokenReview", answer.APIVersion, answer.Kind, apiVersion)
	}
	if strings.Contains(string(body), token) {
		return authv1.TokenReviewStatus{}, errors.New("answer echoes the token")
	}
	return answer.Status, nil
}

func reviewBody(apiVersion, token string) []byte {
	body, _ := json.Marshal(map[string]any{ // a map of strings always marshals
		"apiVersion": apiVersion,
		"kind":       "TokenReview",
		"spec":       map[string]any{"token": token, "audiences": []string{"https://kubernetes.default.svc"}},
	})
	return body
}

func post(t testing.TB, h http.Handler, path string, body []byte) (int, []byte) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.Bytes()
}

// hubUser is the user a valid hub token maps to with defaultProvider.
func hubUser() authv1.UserInfo {
	return authv1.UserInfo{
		Username: "hub:" + controllerSub,
		Extra:    map[string]authv1.ExtraValue{"crucible.dev/hub-namespace": {"crucible"}},
	}
}

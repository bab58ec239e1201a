package webhook

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	authv1 "k8s.io/api/authentication/v1"

	"crucible.dev/crucible/internal/metrics"

	"crucible.dev/crucible/internal/jwt"
	"crucible.dev/crucible/internal/jwt/jwttest"
)

func TestReview(t *testing.T) {
	authenticated := authv1.TokenReviewStatus{Authenticated: true, User: hubUser()}
	rejected := authv1.TokenReviewStatus{}
	unavailable := func(msg string) authv1.TokenReviewStatus {
		return authv1.TokenReviewStatus{Error: "crucible authn webhook: " + msg}
	}
	tests := []struct {
		name     string
		token    func(t *testing.T) string
		want     authv1.TokenReviewStatus
		provider string // label of the reviews metric
	}{
		{
			name:     "valid hub token",
			token:    func(t *testing.T) string { return hubToken(t, hubClaims()) },
			want:     authenticated,
			provider: "hub",
		},
		{
			name:     "aud as a string",
			token:    func(t *testing.T) string { return hubToken(t, with(hubClaims(), map[string]any{"aud": hubAudience})) },
			want:     authenticated,
			provider: "hub",
		},
		{
			name: "wrong audience",
			token: func(t *testing.T) string {
				return hubToken(t, with(hubClaims(), map[string]any{"aud": []string{"dock"}}))
			},
			want:     rejected,
			provider: "hub",
		},
		{
			name: "subject not allow-listed",
			token: func(t *testing.T) string {
				return hubToken(t, with(hubClaims(), map[string]any{"sub": "system:serviceaccount:crucible:default"}))
			},
			want:     rejected,
			provider: "hub",
		},
		{
			name: "claim validation rule fails",
			token: func(t *testing.T) string {
				return hubToken(t, with(hubClaims(), map[string]any{"sub": "alice"}))
			},
			want:     rejected,
			provider: "hub",
		},
		{
			name: "expired",
			token: func(t *testing.T) string {
				now := time.Now()
				return hubToken(t, with(hubClaims(), map[string]any{"iat": now.Add(-2 * time.Hour).Unix(), "nbf": now.Add(-2 * time.Hour).Unix(), "exp": now.Add(-time.Hour).Unix()}))
			},
			want:     rejected,
			provider: "hub",
		},
		{
			name:     "no exp",
			token:    func(t *testing.T) string { return hubToken(t, with(hubClaims(), map[string]any{"exp": nil})) },
			want:     rejected,
			provider: "hub",
		},
		{
			name: "not yet valid",
			token: func(t *testing.T) string {
				return hubToken(t, with(hubClaims(), map[string]any{"nbf": time.Now().Add(time.Hour).Unix()}))
			},
			want:     rejected,
			provider: "hub",
		},
		{
			name: "unknown key of the same issuer",
			token: func(t *testing.T) string {
				return jwttest.Sign(t, testKeys()[1], jose.RS256, "rogue", hubClaims(), nil)
			},
			want:     unavailable(`keys of provider hub unavailable: signing keys unavailable: key id "rogue" unknown, within its grace`),
			provider: "hub",
		},
		{
			name: "published kid, other key",
			token: func(t *testing.T) string {
				return jwttest.Sign(t, testKeys()[1], jose.RS256, "k1", hubClaims(), nil)
			},
			want:     rejected,
			provider: "hub",
		},
		{
			name: "alg none",
			token: func(t *testing.T) string {
				return jwttest.Raw(map[string]any{"alg": "none", "kid": "k1"}, hubClaims(), "")
			},
			want: rejected,
		},
		{
			name: "HS256 keyed with the issuer's public key",
			token: func(t *testing.T) string {
				der, err := x509.MarshalPKIXPublicKey(testKeys()[0].Public())
				if err != nil {
					t.Fatal(err)
				}
				pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
				return jwttest.Sign(t, pubPEM, jose.HS256, "k1", hubClaims(), nil)
			},
			want: rejected,
		},
		{
			name: "tampered payload",
			token: func(t *testing.T) string {
				parts := strings.Split(hubToken(t, hubClaims()), ".")
				claims, _ := json.Marshal(with(hubClaims(), map[string]any{"aud": []string{hubAudience, "dock"}}))
				parts[1] = base64.RawURLEncoding.EncodeToString(claims)
				return strings.Join(parts, ".")
			},
			want:     rejected,
			provider: "hub",
		},
		{
			name: "crit header",
			token: func(t *testing.T) string {
				return jwttest.Sign(t, testKeys()[0], jose.RS256, "k1", hubClaims(), map[string]any{"crit": []string{"exp"}})
			},
			want: rejected,
		},
		{
			name: "embedded jwk header is ignored",
			token: func(t *testing.T) string {
				rogue := jose.JSONWebKey{Key: testKeys()[1].Public(), KeyID: "k1"}
				return jwttest.Sign(t, testKeys()[1], jose.RS256, "k1", hubClaims(), map[string]any{"jwk": rogue})
			},
			want:     rejected,
			provider: "hub",
		},
		{
			name: "JWS JSON serialization",
			token: func(t *testing.T) string {
				return jwttest.JWS(t, testKeys()[0], jose.RS256, "k1", hubClaims(), nil).FullSerialize()
			},
			want: rejected,
		},
		{
			name: "oversized token",
			token: func(t *testing.T) string {
				return hubToken(t, with(hubClaims(), map[string]any{"pad": strings.Repeat("x", jwt.MaxTokenBytes)}))
			},
			want: rejected,
		},
		{
			name:  "four parts",
			token: func(t *testing.T) string { return hubToken(t, hubClaims()) + ".x" },
			want:  rejected,
		},
		{
			name: "unknown issuer",
			token: func(t *testing.T) string {
				return hubToken(t, with(hubClaims(), map[string]any{"iss": "https://kubernetes.default.svc.cluster.local"}))
			},
			want: rejected,
		},
		{
			name: "issuer with a trailing slash",
			token: func(t *testing.T) string {
				return hubToken(t, with(hubClaims(), map[string]any{"iss": hubIssuer + "/"}))
			},
			want: rejected,
		},
		{
			name:  "not a JWT",
			token: func(t *testing.T) string { return "abcdef0123456789" },
			want:  rejected,
		},
	}
	f := newFixture(t, defaultProvider())
	f.logAtDebug() // the token must not leak into any line, Debug included
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			token := tt.token(t)
			result := resultRejected
			switch {
			case tt.want.Authenticated:
				result = resultAuthenticated
			case tt.want.Error != "":
				result = resultError
			}
			counter := metrics.WebhookReviews.WithLabelValues(tt.provider, result)
			before := testutil.ToFloat64(counter)

			got := f.review(t, v1, token)

			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
			if d := testutil.ToFloat64(counter) - before; d != 1 {
				t.Errorf("crucible_webhook_reviews_total{provider=%q,result=%q} rose by %v, want 1", tt.provider, result, d)
			}
			if strings.Contains(f.logs.String(), token) {
				t.Errorf("logs contain the token")
			}
		})
	}
}

func TestReviewRefusesSystemNames(t *testing.T) {
	f := newFixture(t, testProvider{subjects: []string{controllerSub}, prefix: ""})
	f.logAtDebug()
	got := f.review(t, v1, hubToken(t, hubClaims()))
	if diff := cmp.Diff(authv1.TokenReviewStatus{}, got); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	if !strings.Contains(f.logs.String(), "mapped username starts with system:") {
		t.Errorf("logs do not give the reason:\n%s", f.logs)
	}
}

func TestReviewEchoesAPIVersion(t *testing.T) {
	f := newFixture(t, defaultProvider())
	for _, version := range []string{v1, v1beta1} {
		t.Run(version, func(t *testing.T) {
			got := f.review(t, version, hubToken(t, hubClaims())) // review checks apiVersion and kind
			if diff := cmp.Diff(authv1.TokenReviewStatus{Authenticated: true, User: hubUser()}, got); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReviewAnswersErrorWhenKeysUnavailable(t *testing.T) {
	tests := []struct {
		name    string
		break_  func(ti *testIssuer)
		wantErr string
	}{
		{
			name:    "discovery down at first use",
			break_:  func(ti *testIssuer) { ti.discoveryOff = true },
			wantErr: "503 Service Unavailable",
		},
		{
			name:    "discovery names another issuer",
			break_:  func(ti *testIssuer) { ti.issuer = "https://kubernetes.default.svc.cluster.local" },
			wantErr: `names issuer "https://kubernetes.default.svc.cluster.local", configured "https://kubernetes.default.svc"`,
		},
		{
			name:    "JWKS down at first use",
			break_:  func(ti *testIssuer) { ti.jwksOff = true },
			wantErr: "jwks: GET",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, defaultProvider())
			f.iss.set(tt.break_)
			counter := metrics.WebhookReviews.WithLabelValues("hub", resultError)
			before := testutil.ToFloat64(counter)

			got := f.review(t, v1, hubToken(t, hubClaims()))

			if got.Authenticated || !strings.Contains(got.Error, "keys of provider hub unavailable") || !strings.Contains(got.Error, tt.wantErr) {
				t.Errorf("status = %+v, want not authenticated with an error containing %q", got, tt.wantErr)
			}
			if d := testutil.ToFloat64(counter) - before; d != 1 {
				t.Errorf("error reviews rose by %v, want 1", d)
			}
		})
	}
}

func TestReviewBadRequests(t *testing.T) {
	f := newFixture(t, defaultProvider())
	tests := []struct {
		name     string
		method   string
		path     string
		body     string
		wantCode int
		wantBody string
	}{
		{"not JSON", http.MethodPost, "/", "token=abc", http.StatusBadRequest, "request body is not a TokenReview JSON document\n"},
		{"wrong kind", http.MethodPost, "/", `{"apiVersion":"authentication.k8s.io/v1","kind":"SubjectAccessReview","spec":{"token":"a.b.c"}}`, http.StatusBadRequest, "kind must be TokenReview\n"},
		{"wrong apiVersion", http.MethodPost, "/", `{"apiVersion":"authentication.k8s.io/v2","kind":"TokenReview","spec":{"token":"a.b.c"}}`, http.StatusBadRequest, "apiVersion must be authentication.k8s.io/v1 or authentication.k8s.io/v1beta1\n"},
		{"empty token", http.MethodPost, "/authenticate", `{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{}}`, http.StatusBadRequest, "spec.token is empty\n"},
		{"body too large", http.MethodPost, "/", `{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":"` + strings.Repeat("a", maxRequestBytes) + `"}}`, http.StatusRequestEntityTooLarge, "request body larger than 64 KiB\n"},
		{"GET on the review path", http.MethodGet, "/", "", http.StatusMethodNotAllowed, "Method Not Allowed\n"},
		{"PUT on /authenticate", http.MethodPut, "/authenticate", "", http.StatusMethodNotAllowed, "Method Not Allowed\n"},
		{"unknown path", http.MethodPost, "/apis", "", http.StatusNotFound, "404 page not found\n"},
		{"healthz", http.MethodGet, "/healthz", "", http.StatusOK, "ok\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(tt.method, tt.path, strings.NewReader(tt.body))
			rec := httptest.NewRecorder()
			f.h.ServeHTTP(rec, req)
			// Exact: the public message as text (http.Error's format), never
			// the decoder's error.
			if rec.Code != tt.wantCode || rec.Body.String() != tt.wantBody {
				t.Errorf("%s %s = %d %q, want %d %q", tt.method, tt.path, rec.Code, rec.Body, tt.wantCode, tt.wantBody)
			}
			if ct := rec.Header().Get("Content-Type"); tt.wantCode >= 400 && ct != "text/plain; charset=utf-8" {
				t.Errorf("Content-Type = %q", ct)
			}
		})
	}
}

func TestReviewOnAuthenticatePath(t *testing.T) {
	f := newFixture(t, defaultProvider())
	code, body := post(t, f.h, "/authenticate", reviewBody(v1, hubToken(t, hubClaims())))
	if code != http.StatusOK || !strings.Contains(string(body), `"authenticated":true`) {
		t.Errorf("POST /authenticate = %d %s, want 200 authenticated\n%s", code, body, f.logs)
	}
}

func TestReadyzAndMetrics(t *testing.T) {
	f := newFixture(t, defaultProvider())
	f.iss.set(func(ti *testIssuer) { ti.discoveryOff = true })
	code, got := getReadiness(t, f.h)
	if code != http.StatusServiceUnavailable || got.Ready || len(got.Providers) != 1 || got.Providers[0].Ready || got.Providers[0].Error == "" {
		t.Errorf("readyz with discovery down = %d %+v, want 503 with hub not ready and an error", code, got)
	}

	f.iss.set(func(ti *testIssuer) { ti.discoveryOff = false })
	f.clock.Step(11 * time.Second) // past jwksMinRefreshInterval
	code, got = getReadiness(t, f.h)
	zero := int64(0)
	want := Readiness{Ready: true, Providers: []ProviderReadiness{{Name: "hub", Ready: true, KeySource: sourceFetched, KeyAgeSeconds: &zero}}}
	if diff := cmp.Diff(want, got); code != http.StatusOK || diff != "" {
		t.Errorf("readyz = %d, want 200; body (-want +got):\n%s", code, diff)
	}

	rec := httptest.NewRecorder()
	f.srv.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, name := range []string{"crucible_webhook_jwks_fetches_total", "crucible_webhook_config_last_reload_success"} {
		if !strings.Contains(rec.Body.String(), name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
}

func getReadiness(t *testing.T, h http.Handler) (int, Readiness) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	var got Readiness
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatalf("decode readyz %q: %v", rec.Body, err)
	}
	return rec.Code, got
}

package ingest

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rsa"
	"encoding/json"
	"encoding/pem"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	authnv1 "k8s.io/api/authentication/v1"
	"k8s.io/client-go/kubernetes/scheme"
	testingclock "k8s.io/utils/clock/testing"

	"crucible.dev/crucible/internal/artifact"
	"crucible.dev/crucible/internal/fleet"
	"crucible.dev/crucible/internal/jwt/jwttest"
	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/store"
	"crucible.dev/crucible/internal/store/storetest"
)

const (
	testCluster  = "spoke-a"
	testNS       = "loops"
	testSA       = "turn"
	testAudience = "crucible-ingest"
	testKID      = "spoke-key-1"
	testIssuer   = "https://kubernetes.default.svc" // every fake spoke's, as the dev stack's clusters share it
)

// The spokes' signing keys and a key no spoke publishes, shared with the
// other token tests (jwttest generates them once per test binary).
var (
	spokeKey  = jwttest.RSAKeys()[0] // spoke-a
	otherKey  = jwttest.RSAKeys()[1] // nobody's
	spokeBKey = jwttest.RSAKeys()[2] // spoke-b
)

// reviewMode is how the fake spoke answers a TokenReview of one token.
type reviewMode int

const (
	modeVerify      reviewMode = iota // verify like kube-apiserver: signature, audience; identity from the claims
	modeReject                        // authenticated: false, no error: a definitive no
	modeRejectError                   // authenticated: false with status.error (an authenticator it could not consult)
	modeFail                          // HTTP 500
	modeClose                         // close the connection without an answer
	modeHang                          // never answer
	modeOtherAud                      // authenticated, but status.audiences names another audience
)

// fakeSpoke is a TLS kube-apiserver stand-in: OIDC discovery, JWKS and
// TokenReviews, counting what it is asked.
type fakeSpoke struct {
	t   testing.TB
	srv *httptest.Server
	key crypto.Signer // RSA (RS256) or EC (ES256/384/512 by curve)
	kid string

	reviews       atomic.Int64
	jwksFetches   atomic.Int64
	discoveries   atomic.Int64
	jwksFail      atomic.Bool
	discoveryFail atomic.Bool   // the discovery document alone fails (the JWKS does not)
	gate          chan struct{} // when non-nil, reviews wait for it to close

	mu     sync.Mutex
	modes  map[string]reviewMode
	issuer string // the discovery document's issuer
}

func newFakeSpoke(t testing.TB, key crypto.Signer, kid string) *fakeSpoke {
	t.Helper()
	s := &fakeSpoke{t: t, key: key, kid: kid, modes: map[string]reviewMode{}, issuer: testIssuer}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		s.discoveries.Add(1)
		if s.jwksFail.Load() || s.discoveryFail.Load() {
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		s.mu.Lock()
		issuer := s.issuer
		s.mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]string{"issuer": issuer, "jwks_uri": "https://10.0.0.1:6443/openid/v1/jwks"})
	})
	mux.HandleFunc("GET /openid/v1/jwks", func(w http.ResponseWriter, r *http.Request) {
		s.jwksFetches.Add(1)
		if s.jwksFail.Load() {
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		set := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{jwttest.PublicJWK(s.key, s.kid, "")}}
		w.Header().Set("Content-Type", "application/jwk-set+json")
		_ = json.NewEncoder(w).Encode(set)
	})
	mux.HandleFunc("POST /apis/authentication.k8s.io/v1/tokenreviews", s.review)
	s.srv = httptest.NewTLSServer(mux)
	t.Cleanup(s.srv.Close)
	return s
}

// setIssuer changes the issuer the discovery document names.
func (s *fakeSpoke) setIssuer(issuer string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.issuer = issuer
}

func (s *fakeSpoke) setMode(token string, m reviewMode) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.modes[token] = m
}

func (s *fakeSpoke) review(w http.ResponseWriter, r *http.Request) {
	s.reviews.Add(1)
	if s.gate != nil {
		<-s.gate
	}
	// client-go may send protobuf or JSON; the universal deserializer reads both.
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	var tr authnv1.TokenReview
	if _, _, err := scheme.Codecs.UniversalDeserializer().Decode(body, nil, &tr); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	mode := s.modes[tr.Spec.Token]
	s.mu.Unlock()
	switch mode {
	case modeFail:
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	case modeClose:
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	case modeHang:
		<-r.Context().Done()
		return
	}
	tr.APIVersion, tr.Kind = "authentication.k8s.io/v1", "TokenReview"
	tr.Status = s.authenticate(tr.Spec, mode)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(tr)
}

func (s *fakeSpoke) authenticate(spec authnv1.TokenReviewSpec, mode reviewMode) authnv1.TokenReviewStatus {
	no := authnv1.TokenReviewStatus{Error: "[invalid bearer token]"} // kube-apiserver's wording for a bad token
	switch mode {
	case modeReject:
		return authnv1.TokenReviewStatus{}
	case modeRejectError:
		return authnv1.TokenReviewStatus{Error: "[webhook authenticator unavailable]"}
	}
	jws, err := jose.ParseSignedCompact(spec.Token, []jose.SignatureAlgorithm{jose.RS256, jose.ES256, jose.ES384, jose.ES512})
	if err != nil {
		return no
	}
	payload, err := jws.Verify(s.key.Public())
	if err != nil {
		return no
	}
	var c tokenClaims
	if err := json.Unmarshal(payload, &c); err != nil || len(spec.Audiences) != 1 || !contains(c.Aud, spec.Audiences[0]) {
		return no
	}
	auds := spec.Audiences
	if mode == modeOtherAud {
		auds = []string{"something-else"}
	}
	return authnv1.TokenReviewStatus{
		Authenticated: true,
		Audiences:     auds,
		User: authnv1.UserInfo{
			Username: c.Sub,
			Extra: map[string]authnv1.ExtraValue{
				extraPodName: {c.Kube.Pod.Name},
				extraPodUID:  {c.Kube.Pod.UID},
			},
		},
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// tokenClaims are a projected service-account token's claims.
type tokenClaims struct {
	Iss  string  `json:"iss"`
	Sub  string  `json:"sub"`
	Aud  audList `json:"aud"`
	Exp  int64   `json:"exp"`
	Iat  int64   `json:"iat"`
	Jti  string  `json:"jti,omitempty"`
	Kube struct {
		Namespace string `json:"namespace"`
		Pod       struct {
			Name string `json:"name"`
			UID  string `json:"uid"`
		} `json:"pod"`
	} `json:"kubernetes.io"`
}

// podClaims are the claims of a valid ingest token of pod.
func podClaims(now time.Time, pod, uid string) tokenClaims {
	var c tokenClaims
	c.Iss = testIssuer
	c.Sub = "system:serviceaccount:" + testNS + ":" + testSA
	c.Aud = []string{testAudience}
	c.Iat = now.Unix()
	c.Exp = now.Add(time.Hour).Unix()
	c.Kube.Namespace = testNS
	c.Kube.Pod.Name, c.Kube.Pod.UID = pod, uid
	return c
}

// sign makes a compact RS256 JWS of claims with key and header kid.
func sign(t testing.TB, key *rsa.PrivateKey, kid string, claims any) string {
	t.Helper()
	return jwttest.Sign(t, key, jose.RS256, kid, claims, nil)
}

// audList is aud as a string or an array.
type audList []string

func (a *audList) UnmarshalJSON(b []byte) error {
	var one string
	if json.Unmarshal(b, &one) == nil {
		*a = audList{one}
		return nil
	}
	return json.Unmarshal(b, (*[]string)(a))
}

// env is a drop-box wired to fake spokes (one unless asked), a real SQLite
// store and an artifacts dir.
type env struct {
	t      testing.TB
	spoke  *fakeSpoke   // spokes[0], testCluster
	spokes []*fakeSpoke // spokes[i] is cluster testClusters[i]
	h      *Handler
	store  store.Store
	dir    artifact.Dir
	clock  *testingclock.FakeClock
	logs   *syncBuffer
}

// The clusters of a multi-cluster env: names, signing keys, key ids. All
// share testAudience, as clusters configured with the default audience do.
var (
	testClusters = []string{testCluster, "spoke-b"}
	testSpokeKID = []string{testKID, "spoke-key-b"}
)

func testSpokeKey(i int) *rsa.PrivateKey { return []*rsa.PrivateKey{spokeKey, spokeBKey}[i] }

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func newEnv(t testing.TB, modify ...func(*Options)) *env {
	t.Helper()
	return newEnvClusters(t, 1, modify...)
}

// newEnvClusters is newEnv with n (1 or 2) clusters, each its own fake
// spoke with its own signing key.
func newEnvClusters(t testing.TB, n int, modify ...func(*Options)) *env {
	t.Helper()
	tmp := t.TempDir()
	e := &env{
		t: t, dir: artifact.Dir{Root: filepath.Join(tmp, "artifacts")},
		clock: testingclock.NewFakeClock(time.Now().UTC().Truncate(time.Second)), logs: &syncBuffer{},
	}
	var clusters []Cluster
	for i := range n {
		spoke := newFakeSpoke(t, testSpokeKey(i), testSpokeKID[i])
		e.spokes = append(e.spokes, spoke)
		clusters = append(clusters, Cluster{
			Name: testClusters[i], Client: spokeClient(t, spoke, testClusters[i], filepath.Join(tmp, testClusters[i])),
			Namespace: testNS, ServiceAccount: testSA, Audience: testAudience,
		})
	}
	e.spoke = e.spokes[0]
	e.store = storetest.SQLite(t)
	// The profile's defaults, but rates no test reaches unless it sets them.
	limits := profile.Default().Ingest
	limits.RatePerSource, limits.RateBurst, limits.RatePerPod, limits.RateBurstPerPod = 1e9, 1<<30, 1e9, 1<<30
	opts := Options{
		Clusters:  clusters,
		Store:     e.store,
		Artifacts: e.dir,
		Ingest:    limits,
		Now:       e.clock.Now,
		Logger:    slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	for _, m := range modify {
		m(&opts)
	}
	h, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	e.h = h
	return e
}

// spokeClient is the federated client of cluster name, reaching spoke.
func spokeClient(t testing.TB, spoke *fakeSpoke, name, dir string) *fleet.Client {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca.crt")
	tokenFile := filepath.Join(dir, "token")
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: spoke.srv.Certificate().Raw})
	if err := os.WriteFile(caFile, ca, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tokenFile, []byte("controller-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	clients, err := fleet.NewClients([]profile.ClusterEntry{{
		Name: name, Server: spoke.srv.URL, CAFile: caFile, TokenFile: tokenFile,
		LoopNamespace: testNS, TurnServiceAccount: testSA, IngestAudience: testAudience,
		QPS: 1e6, Burst: 1e6,
	}})
	if err != nil {
		t.Fatal(err)
	}
	client, _ := clients.Get(name)
	return client
}

// addPod records a running work pod on the test cluster and returns its
// valid ingest token.
func (e *env) addPod(id, uid string) string {
	e.t.Helper()
	return e.addPodOn(0, id, uid)
}

// addPodOn records a running work pod on cluster testClusters[i] and
// returns its valid ingest token, signed by that cluster's key.
func (e *env) addPodOn(i int, id, uid string) string {
	e.t.Helper()
	_, err := e.store.CreateWorkPod(ctxOf(e.t), store.WorkPod{
		ID: id, Cluster: testClusters[i], Namespace: testNS, Kind: "turn", State: store.StateRunning, PodUID: uid,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return sign(e.t, testSpokeKey(i), testSpokeKID[i], podClaims(e.clock.Now(), id, uid))
}

func (e *env) token(pod, uid string) string {
	e.t.Helper()
	return sign(e.t, spokeKey, testKID, podClaims(e.clock.Now(), pod, uid))
}

// request builds a drop-box request; token "" sends no Authorization.
func (e *env) request(method, path, token string, body []byte) *http.Request {
	e.t.Helper()
	r := httptest.NewRequestWithContext(ctxOf(e.t), method, path, bytes.NewReader(body))
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	return r
}

func (e *env) serve(r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, r)
	return w
}

func (e *env) post(pod, kind, token string, body []byte) *httptest.ResponseRecorder {
	e.t.Helper()
	return e.serve(e.request(http.MethodPost, "/api/pods/"+pod+"/artifacts/"+kind, token, body))
}

// files lists the artifact dir of pod (temp files included).
func (e *env) files(pod string) []string {
	e.t.Helper()
	entries, err := os.ReadDir(filepath.Join(e.dir.Root, pod))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	var names []string
	for _, en := range entries {
		names = append(names, en.Name())
	}
	return names
}

// ctxOf is the test's context (t.Context() of a test or benchmark).
func ctxOf(t testing.TB) context.Context { return t.Context() }

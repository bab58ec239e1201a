package e2e

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"crucible.dev/crucible/internal/devstack"
)

// The hostile-input corpus (issue 8 §3): every case is a token or request an
// attacker on the internet, a malicious work pod or a confused client could
// send, with the exact answer crucible owes it. The webhook is attacked
// through a real spoke's kube-apiserver (which asks the webhook), the
// drop-box through the controller's external listener. Issue 23's hostile
// cases that need a stack of their own or several steps live beside it:
// garbage floods of the drop-box (internal/ingest/abuse_test.go) and of the API in
// kubernetes mode (apiauth_budget_test.go), 64 KiB log lines to stalled
// viewers (live_budget_test.go), revoked and capped streams
// (events_budget_test.go), foreign origins and ports on the run-live relay
// (portforward_test.go). Issue 37's: a pod's valid token replayed from one
// address against other pods and unknown pod ids, refused without reading the
// store while the pods behind that address still upload
// (ingest_replay_test.go; the stale-uid, unknown-id and per-source cases in
// internal/ingest/replay_test.go), and one submitter or cluster filling its
// artifact budget (internal/ingest/budgets_test.go).
// Issue 37's hostile ClusterProfiles, read by the
// cluster-inventory-api credentials library with `crucible credential` as
// the access provider (clusterprofile_test.go,
// TestClusterProfileHostileStatusRefused): a status pointing wharf's server
// at a listener of the attacker's, a tokenFile outside CRUCIBLE_TOKEN_DIR
// (named directly and through a symlink), and the consumer's own hub token
// with the hub's audience — each refused by the plugin, naming its check,
// with no Authorization header reaching the listener; their unit cases
// (server spellings, CAs, skip-verify, TLS name, proxy, .., a token of two
// audiences) are internal/cli/credential_pins_test.go's, with a fuzz test
// of the server comparison.
// Another submitter's pod on the run-live relay, and a session outliving
// the run_live key a reload turned off (portforward_owner_test.go).

// signRaw signs raw header and claims JSON with key (RS256 for RSA, ES256 for
// P-256), so a case can carry JSON that encoding/json would never produce
// (duplicate members).
func signRaw(t testing.TB, key crypto.Signer, header, claims string) string {
	t.Helper()
	input := base64.RawURLEncoding.EncodeToString([]byte(header)) + "." + base64.RawURLEncoding.EncodeToString([]byte(claims))
	digest := sha256.Sum256([]byte(input))
	var sig []byte
	switch k := key.(type) {
	case *rsa.PrivateKey:
		var err error
		if sig, err = rsa.SignPKCS1v15(rand.Reader, k, crypto.SHA256, digest[:]); err != nil {
			t.Fatal(err)
		}
	case *ecdsa.PrivateKey:
		r, s, err := ecdsa.Sign(rand.Reader, k, digest[:])
		if err != nil {
			t.Fatal(err)
		}
		sig = append(pad32(r), pad32(s)...)
	default:
		t.Fatalf("unsupported key %T", key)
	}
	return input + "." + base64.RawURLEncoding.EncodeToString(sig)
}

func pad32(n *big.Int) []byte {
	b := make([]byte, 32)
	return n.FillBytes(b)
}

// publicJWK is key's public half as a JWK member value.
func publicJWK(t testing.TB, key *rsa.PrivateKey) map[string]any {
	t.Helper()
	data, err := jose.JSONWebKey{Key: &key.PublicKey, KeyID: keyID(t, key), Algorithm: "RS256", Use: "sig"}.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// selfSignedDER is a throwaway certificate for key, for x5c headers.
func selfSignedDER(t testing.TB, key *rsa.PrivateKey) string {
	t.Helper()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(der)
}

// jsonSerialization turns a compact token into the JWS JSON serialization.
func jsonSerialization(compact string) string {
	parts := strings.Split(compact, ".")
	data, _ := json.Marshal(map[string]string{"protected": parts[0], "payload": parts[1], "signature": parts[2]})
	return string(data)
}

// hostileTokens are the token shapes both boundaries must refuse, built on
// valid claims and signed with key (the issuer's real key) or a stranger's.
// Each returns the token; kid is the real key's id.
func hostileTokens(t *testing.T, key *rsa.PrivateKey, valid func() map[string]any) map[string]string {
	stranger := mustKey(t)
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})
	kid := keyID(t, key)
	claimsJSON := func(c map[string]any) string { data, _ := json.Marshal(c); return string(data) }
	with := func(edit func(c map[string]any)) map[string]any { c := valid(); edit(c); return c }
	now := time.Now()

	return map[string]string{
		"alg none":                           forged{claims: valid()}.unsigned(t, kid),
		"alg none, upper case":               b64json(t, map[string]any{"alg": "NONE", "kid": kid}) + "." + b64json(t, valid()) + ".",
		"HS256 keyed with the public PEM":    forged{claims: valid()}.signHS256(t, pubPEM, kid),
		"HS256 keyed with the public DER":    forged{claims: valid()}.signHS256(t, pub, kid),
		"unknown kid, stranger's key":        forged{claims: valid()}.signRS256(t, stranger),
		"the real kid, stranger's key":       forged{claims: valid(), header: map[string]any{"kid": kid}}.signRS256(t, stranger),
		"no kid, stranger's key":             signRaw(t, stranger, `{"alg":"RS256"}`, claimsJSON(valid())),
		"ES256 with a stranger's EC key":     signRaw(t, ec, `{"alg":"ES256","kid":"ec-1"}`, claimsJSON(valid())),
		"jku header to attacker keys":        forged{claims: valid(), header: map[string]any{"jku": "https://127.0.0.1:1/jwks"}}.signRS256(t, stranger),
		"x5u header to attacker cert":        forged{claims: valid(), header: map[string]any{"x5u": "https://127.0.0.1:1/cert"}}.signRS256(t, stranger),
		"jwk header embedding the signer":    forged{claims: valid(), header: map[string]any{"jwk": publicJWK(t, stranger)}}.signRS256(t, stranger),
		"x5c header embedding the signer":    forged{claims: valid(), header: map[string]any{"x5c": []string{selfSignedDER(t, stranger)}}}.signRS256(t, stranger),
		"crit header, real key":              forged{claims: valid(), header: map[string]any{"crit": []string{"exp"}, "exp": 1}}.signRS256(t, key),
		"JWS JSON serialization, real key":   jsonSerialization(forged{claims: valid()}.signRS256(t, key)),
		"tampered payload":                   tamper(forged{claims: valid()}.signRS256(t, key)),
		"signature stripped":                 strings.Join(strings.Split(forged{claims: valid()}.signRS256(t, key), ".")[:2], ".") + ".",
		"expired an hour ago, real key":      forged{claims: with(func(c map[string]any) { c["exp"] = now.Add(-time.Hour).Unix() })}.signRS256(t, key),
		"no exp, real key":                   forged{claims: with(func(c map[string]any) { delete(c, "exp") })}.signRS256(t, key),
		"exp as a string, real key":          forged{claims: with(func(c map[string]any) { c["exp"] = "tomorrow" })}.signRS256(t, key),
		"nbf in an hour, real key":           forged{claims: with(func(c map[string]any) { c["nbf"] = now.Add(time.Hour).Unix() })}.signRS256(t, key),
		"aud empty array, real key":          forged{claims: with(func(c map[string]any) { c["aud"] = []string{} })}.signRS256(t, key),
		"aud missing, real key":              forged{claims: with(func(c map[string]any) { delete(c, "aud") })}.signRS256(t, key),
		"oversized (64 KiB), real key":       forged{claims: with(func(c map[string]any) { c["pad"] = strings.Repeat("x", 64<<10) })}.signRS256(t, key),
		"four segments":                      forged{claims: valid()}.signRS256(t, key) + ".x",
		"garbage":                            "not-a-token",
		"base64 of nothing":                  "..",
		"header not JSON":                    base64.RawURLEncoding.EncodeToString([]byte("{alg")) + "." + b64json(t, valid()) + ".sig",
		"header is a JSON array":             base64.RawURLEncoding.EncodeToString([]byte(`["RS256"]`)) + "." + b64json(t, valid()) + ".sig",
		"duplicate aud, last one foreign":    signRaw(t, key, `{"alg":"RS256","kid":"`+kid+`"}`, dupLast(claimsJSON(valid()), "aud", `["foreign"]`)),
		"duplicate alg, last one none":       dupAlgNone(t, key, kid, valid()),
		"wrong issuer, stranger's key":       forged{claims: with(func(c map[string]any) { c["iss"] = "https://evil.example" })}.signRS256(t, stranger),
		"issuer with trailing slash":         forged{claims: with(func(c map[string]any) { c["iss"] = devstack.Issuer + "/" })}.signRS256(t, stranger),
		"RSA 1024-bit key with the real kid": forged{claims: valid(), header: map[string]any{"kid": kid}}.signRS256(t, weakKey(t)),
	}
}

// tamper rewrites one byte of the payload, keeping the signature.
func tamper(tok string) string {
	parts := strings.Split(tok, ".")
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	payload[len(payload)/2] ^= 1
	return parts[0] + "." + base64.RawURLEncoding.EncodeToString(payload) + "." + parts[2]
}

// dupLast appends a second member name with value to a JSON object; with
// encoding/json's last-wins rule every parser crucible uses reads the last.
func dupLast(obj, name, value string) string {
	return strings.TrimSuffix(obj, "}") + `,"` + name + `":` + value + "}"
}

// dupAlgNone signs a header whose second alg member says none.
func dupAlgNone(t *testing.T, key *rsa.PrivateKey, kid string, claims map[string]any) string {
	data, _ := json.Marshal(claims)
	return signRaw(t, key, `{"alg":"RS256","kid":"`+kid+`","alg":"none"}`, string(data))
}

func weakKey(t *testing.T) *rsa.PrivateKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestWebhookCorpus sends every hostile token to a spoke, whose
// kube-apiserver asks crucible's webhook: each must be 401, and the valid
// controls must pass, so the refusals are about what each case changed.
func TestWebhookCorpus(t *testing.T) {
	s := sharedStack(t)
	wharf := s.Spoke("wharf")
	ctx := t.Context()
	if _, err := s.Hub.Client.CoreV1().ServiceAccounts(devstack.HubNamespace).Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "other"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	hubKey := s.Hub.ServiceAccountKey.Key
	valid := func() map[string]any { return hubClaims(devstack.HubSubject, "wharf") }
	accepted := map[string]string{
		"control: valid claims, the hub's key":   forged{claims: valid()}.signRS256(t, hubKey),
		"control: aud as a string":               forged{claims: map[string]any{"iss": devstack.Issuer, "sub": devstack.HubSubject, "aud": "wharf", "iat": time.Now().Unix(), "nbf": time.Now().Unix(), "exp": time.Now().Add(10 * time.Minute).Unix()}}.signRS256(t, hubKey),
		"control: a real hub TokenRequest token": hubToken(t, s, devstack.HubServiceAccount, "wharf"),
	}
	for name, tok := range accepted {
		t.Run(name, func(t *testing.T) {
			if got, err := whoami(ctx, s, wharf, tok); err != nil || got != controllerUser {
				t.Errorf("whoami = %q, %v; want %q", got, err, controllerUser)
			}
		})
	}
	refused := hostileTokens(t, hubKey, valid)
	refused["audience of another spoke"] = hubToken(t, s, devstack.HubServiceAccount, "dock")
	refused["the hub's own audience"] = hubToken(t, s, devstack.HubServiceAccount, devstack.Issuer)
	refused["another hub service account"] = hubToken(t, s, "other", "wharf")
	// Duplicate member names are refused outright, whichever comes last.
	refused["duplicate sub, last is allowed"] = signRaw(t, hubKey, `{"alg":"RS256","kid":"`+keyID(t, hubKey)+`"}`, dupLast(jsonOf(t, hubClaims("system:serviceaccount:crucible:other", "wharf")), "sub", `"`+devstack.HubSubject+`"`))
	refused["duplicate sub, last not allowed"] = signRaw(t, hubKey, `{"alg":"RS256","kid":"`+keyID(t, hubKey)+`"}`, dupLast(jsonOf(t, valid()), "sub", `"system:serviceaccount:crucible:other"`))
	refused["a spoke's own token (spoke key)"] = ingestToken(t, wharf, devstack.SpokeServiceAccount, "", "", "wharf")
	for name, tok := range refused {
		t.Run(name, func(t *testing.T) {
			got, err := whoami(ctx, s, wharf, tok)
			if !apierrors.IsUnauthorized(err) {
				t.Errorf("whoami = %q, %v; want 401 Unauthorized", got, err)
			}
		})
	}
	if n := len(accepted) + len(refused); n < 40 {
		t.Errorf("the webhook corpus has %d cases, want at least 40", n)
	}
}

// h1Client speaks HTTP/1.1 to the dev stack's listeners.
func h1Client(t *testing.T) *http.Client {
	t.Helper()
	tlsConfig, err := rest.TLSConfigFor(rest.AnonymousClientConfig(sharedStack(t).Hub.Admin))
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig}}
}

func jsonOf(t testing.TB, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestDropBoxCorpus sends hostile requests to the drop-box on the external
// listener. Every 401 body is the same, and so is every 403 body: an outsider
// learns nothing about which pods exist.
func TestDropBoxCorpus(t *testing.T) {
	s := sharedStack(t)
	wharf, dock := s.Spoke("wharf"), s.Spoke("dock")
	// HTTP/1.1, so oversized headers reach the server (Go's HTTP/2 client
	// refuses to send more than the server advertises).
	client := h1Client(t)
	ctx := t.Context()
	p := workPodOn(t, s, "wharf")
	q := workPodOn(t, s, "wharf")
	d := workPodOn(t, s, "dock")
	if _, err := wharf.Client.CoreV1().ServiceAccounts(devstack.SpokeNamespace).Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "other"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// A cancelled pod: its row no longer takes uploads, whatever its token.
	gone := workPodOn(t, s, "wharf")
	goneTok := ingestToken(t, wharf, devstack.SpokeServiceAccount, gone.ID, gone.PodUID)
	apiCall(t, s, http.MethodPost, "/api/pods/"+gone.ID+"/cancel", nil)
	waitState(t, s, gone.ID, "cancelled", 30*time.Second)

	own := ingestToken(t, wharf, devstack.SpokeServiceAccount, p.ID, p.PodUID)
	spokeKey := wharf.ServiceAccountKey.Key
	valid := func() map[string]any {
		return hubClaims("system:serviceaccount:"+devstack.SpokeNamespace+":"+devstack.SpokeServiceAccount, devstack.IngestAudience)
	}
	type tc struct {
		pod, kind, auth string
		want            int
	}
	cases := map[string]tc{
		"control: the pod's own token": {p.ID, "result", "Bearer " + own, http.StatusCreated},
		"no Authorization header":      {p.ID, "result", "", http.StatusUnauthorized},
		"Basic credentials":            {p.ID, "result", "Basic dXNlcjpwYXNz", http.StatusUnauthorized},
		"Bearer with no token":         {p.ID, "result", "Bearer ", http.StatusUnauthorized},
		"token 20 KiB long":            {p.ID, "result", "Bearer " + strings.Repeat("a", 20<<10), http.StatusUnauthorized},
		"token bound to another pod":   {p.ID, "result", "Bearer " + ingestToken(t, wharf, devstack.SpokeServiceAccount, q.ID, q.PodUID), http.StatusForbidden},
		"another service account":      {p.ID, "result", "Bearer " + ingestToken(t, wharf, "other", "", ""), http.StatusForbidden},
		"valid token, unknown pod":     {"turn-unknown00", "result", "Bearer " + own, http.StatusForbidden},
		// Bound to another pod than the request's: refused by its own pod
		// claim before the row (and so its cluster) is read (issue 37).
		"the other spoke's pod token":   {p.ID, "result", "Bearer " + ingestToken(t, dock, devstack.SpokeServiceAccount, d.ID, d.PodUID), http.StatusForbidden},
		"token of the spoke's audience": {p.ID, "result", "Bearer " + ingestToken(t, wharf, devstack.SpokeServiceAccount, p.ID, p.PodUID, "wharf"), http.StatusUnauthorized},
		"a hub token":                   {p.ID, "result", "Bearer " + hubToken(t, s, devstack.HubServiceAccount, devstack.IngestAudience), http.StatusUnauthorized},
		"cancelled pod, its own token":  {gone.ID, "result", "Bearer " + goneTok, http.StatusForbidden},
		"reserved kind log":             {p.ID, "log", "Bearer " + own, http.StatusForbidden},
		"reserved prefix crucible-":     {p.ID, "crucible-status", "Bearer " + own, http.StatusForbidden},
		"forged, unknown pod":           {"turn-unknown02", "result", "Bearer " + forged{claims: valid()}.signRS256(t, mustKey(t)), http.StatusUnauthorized},
	}
	for name, tok := range hostileTokens(t, spokeKey, valid) {
		cases[name] = tc{p.ID, "result", "Bearer " + tok, http.StatusUnauthorized}
	}
	cases["oversized (64 KiB), real key"] = tc{p.ID, "result", cases["oversized (64 KiB), real key"].auth, http.StatusRequestHeaderFieldsTooLarge}
	bodies := map[int]string{}
	i := 0
	for name, c := range cases {
		// Each case from its own address (the dev stack's router is a
		// trusted proxy), so the per-source limit of failed
		// authentications does not answer for the case.
		i++
		source := fmt.Sprintf("192.0.2.%d", i)
		t.Run(name, func(t *testing.T) {
			code, _, body := upload(t, s, client, c.pod, c.kind, c.auth, source, []byte("x"))
			if code != c.want {
				t.Errorf("%d %s, want %d", code, body, c.want)
			}
			if (code == http.StatusUnauthorized && c.auth != "") || (code == http.StatusForbidden && !strings.HasPrefix(c.kind, "crucible-") && c.kind != "log") {
				if prev, ok := bodies[code]; ok && prev != body {
					t.Errorf("%d body %q differs from another %d body %q", code, body, code, prev)
				}
				bodies[code] = body
			}
		})
	}

	paths := map[string]int{
		"/api/pods/" + p.ID + "/artifacts/..":                         http.StatusBadRequest,
		"/api/pods/" + p.ID + "/artifacts/Result":                     http.StatusBadRequest,
		"/api/pods/%2e%2e/artifacts/x":                                http.StatusBadRequest,
		"/api/pods/" + p.ID + "/artifacts/a%2Fb":                      http.StatusBadRequest,
		"/api/pods/" + p.ID + "/artifacts/%00":                        http.StatusBadRequest,
		"/api/pods/" + p.ID + "/artifacts/" + strings.Repeat("a", 64): http.StatusBadRequest,
		"/api/pods/" + p.ID + "/artifacts/x/y":                        http.StatusNotFound,
		"/api/pods":                                                   http.StatusNotFound,
		"/metrics":                                                    http.StatusNotFound,
		"/.well-known/openid-configuration":                           http.StatusMethodNotAllowed,
	}
	for path, want := range paths {
		t.Run("POST "+path, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.Federation.ControllerExternalURL+path, strings.NewReader("x"))
			req.Header.Set("Authorization", "Bearer "+own)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			// Go's mux cleans some paths before the handler sees them; a
			// redirect or 404 there is as good as 400: nothing is stored.
			// The mirror owns every other path and answers GET/HEAD only.
			equivalent := (want == http.StatusBadRequest && (resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMovedPermanently)) ||
				(want == http.StatusNotFound && resp.StatusCode == http.StatusMethodNotAllowed)
			if resp.StatusCode != want && !equivalent {
				t.Errorf("%d, want %d", resp.StatusCode, want)
			}
		})
	}
	t.Run("GET on the drop-box", func(t *testing.T) {
		resp, err := get(ctx, client, s.Federation.ControllerExternalURL+"/api/pods/"+p.ID+"/artifacts/result")
		if err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("%v %v, want 405", resp, err)
		}
	})
	t.Run("headers of 2 MiB", func(t *testing.T) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.Federation.ControllerExternalURL+"/api/pods/"+p.ID+"/artifacts/result", strings.NewReader("x"))
		req.Header.Set("X-Junk", strings.Repeat("j", 2<<20))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("%d, want 431", resp.StatusCode)
		}
	})
	t.Run("body over the limit", func(t *testing.T) {
		if code, _, _ := upload(t, s, client, p.ID, "big", "Bearer "+own, "", make([]byte, 64<<20+1)); code != http.StatusRequestEntityTooLarge {
			t.Errorf("%d, want 413", code)
		}
		if code, _ := apiCall(t, s, http.MethodGet, "/api/pods/"+p.ID+"/artifacts/big", nil); code != http.StatusNotFound {
			t.Errorf("the oversized upload left an artifact: %d", code)
		}
	})
	if n := len(cases) + len(paths) + 3; n < 40 {
		t.Errorf("the drop-box corpus has %d cases, want at least 40", n)
	}
}

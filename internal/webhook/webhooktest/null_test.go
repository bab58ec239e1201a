package webhooktest

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	authv1 "k8s.io/api/authentication/v1"

	"crucible.dev/crucible/internal/render"
)

func TestMain(m *testing.M) {
	ServeIfChild()
	os.Exit(m.Run())
}

// TestNullAnswersEveryReview: any token is authenticated as the given user,
// requests that are not TokenReviews are refused, and clients without the
// client certificate are refused in the handshake.
func TestNullAnswersEveryReview(t *testing.T) {
	n := StartNull(t, "hub:someone", os.Environ())
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: n.ClientTLS(t), ForceAttemptHTTP2: true}}
	post := func(c *http.Client, body string) (*http.Response, error) {
		return c.Post(n.URL, "application/json", bytes.NewReader([]byte(body)))
	}

	resp, err := post(client, `{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":"not.even.a-jwt"}}`)
	if err != nil {
		t.Fatal(err)
	}
	var answer authv1.TokenReview
	err = json.NewDecoder(resp.Body).Decode(&answer)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || !answer.Status.Authenticated ||
		answer.Status.User.Username != "hub:someone" || answer.APIVersion != "authentication.k8s.io/v1" {
		t.Errorf("review = %d %+v (%v), want 200 authenticated as hub:someone", resp.StatusCode, answer, err)
	}
	if resp.ProtoMajor != 2 {
		t.Errorf("protocol %s, want HTTP/2 as crucible's webhook serves", resp.Proto)
	}

	for _, body := range []string{`{"kind":"TokenReview","spec":{}}`, `not json`, `{"kind":"SubjectAccessReview","spec":{"token":"x"}}`} {
		resp, err := post(client, body)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("POST %s = %d, want 400", body, resp.StatusCode)
		}
	}

	noCert := n.ClientTLS(t)
	noCert.Certificates = nil
	anon := &http.Client{Transport: &http.Transport{TLSClientConfig: noCert, ForceAttemptHTTP2: true, TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}}
	if resp, err := post(anon, `{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":"x"}}`); err == nil {
		resp.Body.Close()
		t.Errorf("a client without a certificate got %d, want a refused handshake", resp.StatusCode)
	}
}

// TestLibraryJudgesTokens: the library webhook authenticates a token the
// configured issuer signed for the configured audience, mapped as the
// configuration says, and refuses one signed by another key, one for
// another audience, and a token that is no JWT.
func TestLibraryJudgesTokens(t *testing.T) {
	dir := t.TempDir()
	hubKey, otherKey := rsaKey(t), rsaKey(t)
	pubDER, err := x509.MarshalPKIXPublicKey(&hubKey.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "hub.pub")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644); err != nil {
		t.Fatal(err)
	}
	const issuer, sub = "https://hub.example", "system:serviceaccount:crucible:crucible-controller"
	cfg, err := render.WebhookConfig(render.HubTrust{Issuer: issuer, DiscoveryURL: issuer + "/.well-known/openid-configuration",
		Audience: "wharf", AllowedSubjects: []string{sub}, UsernamePrefix: "hub:"})
	if err != nil {
		t.Fatal(err)
	}
	configFile := filepath.Join(dir, "webhook.yaml")
	if err := os.WriteFile(configFile, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	w := Prepare(t)
	w.ServeLibrary(configFile, keyFile, os.Environ())
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: w.ClientTLS(t), ForceAttemptHTTP2: true}}

	now := time.Now()
	claims := map[string]any{"iss": issuer, "sub": sub, "aud": []string{"wharf"}, "iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(time.Hour).Unix()}
	otherAud := map[string]any{"iss": issuer, "sub": sub, "aud": []string{"dock"}, "iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(time.Hour).Unix()}
	for _, tc := range []struct {
		name, token string
		want        string // username; "" for not authenticated
	}{
		{"signed by the issuer", sign(t, hubKey, claims), "hub:" + sub},
		{"signed by another key", sign(t, otherKey, claims), ""},
		{"for another audience", sign(t, hubKey, otherAud), ""},
		{"no JWT", "not.a-jwt", ""},
	} {
		body := `{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":"` + tc.token + `"}}`
		resp, err := client.Post(w.URL, "application/json", bytes.NewReader([]byte(body)))
		if err != nil {
			t.Fatal(err)
		}
		var answer authv1.TokenReview
		err = json.NewDecoder(resp.Body).Decode(&answer)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d (%v), want 200 and a TokenReview", tc.name, resp.StatusCode, err)
		}
		if answer.Status.Authenticated != (tc.want != "") || answer.Status.User.Username != tc.want {
			t.Errorf("%s: authenticated %v as %q, want %q", tc.name, answer.Status.Authenticated, answer.Status.User.Username, tc.want)
		}
	}
}

func rsaKey(t *testing.T) *rsa.PrivateKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func sign(t *testing.T, key *rsa.PrivateKey, claims map[string]any) string {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key}, nil)
	if err != nil {
		t.Fatal(err)
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	jws, err := signer.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	token, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return token
}

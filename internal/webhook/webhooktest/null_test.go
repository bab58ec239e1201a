package webhooktest

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"os"
	"testing"

	authv1 "k8s.io/api/authentication/v1"
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

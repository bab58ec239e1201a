package e2e

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/testpki"
)

// A spoke's webhook answers TokenReviews only to its kube-apiserver's client
// certificate: no certificate, one from another CA, or one from the stack's
// own CA with another name (the admin's) is refused in the TLS handshake.
// Its /metrics is on the plain operations listener, not on the TLS one.
func TestWebhookRequiresAPIServerCertificate(t *testing.T) {
	s := sharedStack(t)
	url := s.Federation.WebhookURLs["wharf"] + "/authenticate"
	body := func(token string) []byte {
		data, _ := json.Marshal(authenticationv1.TokenReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "authentication.k8s.io/v1", Kind: "TokenReview"}, Spec: authenticationv1.TokenReviewSpec{Token: token},
		})
		return data
	}
	token := hubToken(t, s, devstack.HubServiceAccount, "wharf")

	admin, err := tls.LoadX509KeyPair(filepath.Join(s.Dir, "pki", "admin.crt"), filepath.Join(s.Dir, "pki", "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	foreign := testpki.NewCA(t, "foreign").Issue(t, devstack.WebhookClientName("wharf"), testpki.Client).Pair(t)
	for name, cert := range map[string]*tls.Certificate{"no certificate": nil, "another CA": &foreign, "the admin's certificate": &admin} {
		resp, err := certClient(t, s, cert).Post(url, "application/json", bytes.NewReader(body(token)))
		if err == nil {
			resp.Body.Close()
			t.Errorf("%s: TokenReview answered %s, want the TLS handshake refused", name, resp.Status)
		}
	}

	kp := s.Federation.WebhookClientCerts["wharf"]
	apiserver, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	client := certClient(t, s, &apiserver)
	resp, err := client.Post(url, "application/json", bytes.NewReader(body(token)))
	if err != nil {
		t.Fatalf("TokenReview with kube-apiserver's certificate: %v", err)
	}
	var answer authenticationv1.TokenReview
	err = json.NewDecoder(resp.Body).Decode(&answer)
	resp.Body.Close()
	if err != nil || !answer.Status.Authenticated || answer.Status.User.Username != controllerUser {
		t.Errorf("TokenReview = %s %+v %v, want %s authenticated", resp.Status, answer.Status, err, controllerUser)
	}

	resp, err = client.Get(s.Federation.WebhookURLs["wharf"] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("/metrics on the TokenReview listener = %s, want 404", resp.Status)
	}
	if metrics := getBody(t, t.Context(), caClient(t), s.Federation.WebhookMetricsURLs["wharf"]+"/metrics"); !strings.Contains(metrics, "crucible_webhook_reviews_total") {
		t.Errorf("operations listener /metrics lacks crucible_webhook_reviews_total:\n%.500s", metrics)
	}
}

// certClient trusts the stack's CA and presents cert, if any. Each call has
// its own connections, so every request does its own handshake.
func certClient(t testing.TB, s *devstack.Stack, cert *tls.Certificate) *http.Client {
	t.Helper()
	c := http2Client(t, s.CAFile)
	tr := c.Transport.(*http.Transport)
	if cert != nil {
		tr.TLSClientConfig.Certificates = []tls.Certificate{*cert}
	}
	t.Cleanup(tr.CloseIdleConnections)
	return c
}

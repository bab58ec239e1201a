package fleet

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"crucible.dev/crucible/internal/apiauth"
	"crucible.dev/crucible/internal/retry"

	"crucible.dev/crucible/internal/profile"
)

// recorder is a server anywhere the controller can reach, answering every
// request with a plausible log: what a redirect would steer the controller to.
type recorder struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen []string // "METHOD path Authorization"
}

func newRecorder(t *testing.T) *recorder {
	t.Helper()
	rec := &recorder{}
	rec.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.mu.Lock()
		rec.seen = append(rec.seen, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
		rec.mu.Unlock()
		_, _ = io.WriteString(w, "a log the spoke chose\n")
	}))
	t.Cleanup(rec.srv.Close)
	return rec
}

func (rec *recorder) requests() []string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]string{}, rec.seen...)
}

// redirectingSpoke answers every request with code to target's /stolen: a
// compromised spoke, or whatever sits in front of its API server.
func redirectingSpoke(t *testing.T, code int, target string) profile.ClusterEntry {
	t.Helper()
	srv, caFile := newTLSServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target+"/stolen", code)
	}))
	s := &fakeSpoke{srv: srv, caFile: caFile}
	return entryFor(t, "wharf", s, "token-a")
}

// spokeCalls are requests of every shape the controller sends a spoke: a
// stream (pods/log), a typed read, a create with a body, and the plain HTTP
// client (the drop-box's JWKS fetch).
func spokeCalls(c *Client) map[string]func(context.Context) error {
	return map[string]func(context.Context) error{
		"pods/log stream": func(ctx context.Context) error {
			rc, err := c.Kube.CoreV1().Pods("loops").GetLogs("turn-1", &corev1.PodLogOptions{}).Stream(ctx)
			if err == nil {
				rc.Close()
			}
			return err
		},
		"pod get": func(ctx context.Context) error {
			_, err := c.Kube.CoreV1().Pods("loops").Get(ctx, "turn-1", metav1.GetOptions{})
			return err
		},
		"tokenreview create": func(ctx context.Context) error {
			_, err := c.Kube.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{}, metav1.CreateOptions{})
			return err
		},
		"HTTP get": func(ctx context.Context) error {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.Entry.Server+"/openid/v1/jwks", nil)
			if err != nil {
				return err
			}
			resp, err := c.HTTP.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			return err
		},
	}
}

// TestSpokeClientsRefuseRedirects: a spoke that answers with a redirect
// cannot steer the controller (with the spoke token its transport adds to
// every request) to another address, and what it sent is not taken for the
// answer: every request of every shape fails with ErrRedirect, naming the
// spoke and where it pointed.
func TestSpokeClientsRefuseRedirects(t *testing.T) {
	for _, code := range []int{http.StatusFound, http.StatusTemporaryRedirect} {
		rec := newRecorder(t)
		c, _ := newClientsT(t, redirectingSpoke(t, code, rec.srv.URL)).Get("wharf")
		for name, call := range spokeCalls(c) {
			t.Run(http.StatusText(code)+"/"+name, func(t *testing.T) {
				err := call(t.Context())
				if !errors.Is(err, ErrRedirect) {
					t.Fatalf("error = %v, want ErrRedirect", err)
				}
				want := "spoke wharf answered with a redirect to " + rec.srv.URL + "/stolen"
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
				if strings.Contains(err.Error(), "token-a") {
					t.Errorf("error %q holds the token", err)
				}
				// An answer, not a blip: dispatch and log collection must
				// not spend their retry budget asking again.
				if retry.IsTransient(err) {
					t.Errorf("retry.IsTransient(%v) = true, want a permanent error", err)
				}
			})
		}
		if diff := cmp.Diff([]string{}, rec.requests()); diff != "" {
			t.Errorf("%d: requests the redirect's target got (-want +got):\n%s", code, diff)
		}
	}
}

// TestHubReviewClientRefusesRedirects: the client the API's TokenReviews and
// SubjectAccessReviews go through (built as the controller builds it, from
// TokenFileConfig) follows no redirect either, so no one in front of the hub
// can answer who a caller is, or what it may do, from elsewhere.
func TestHubReviewClientRefusesRedirects(t *testing.T) {
	rec := newRecorder(t)
	hub := redirectingSpoke(t, http.StatusTemporaryRedirect, rec.srv.URL)
	cfg, err := TokenFileConfig(hub.Server, hub.CAFile, hub.TokenFile)
	if err != nil {
		t.Fatal(err)
	}
	_, kube, err := NewClientset("hub", cfg)
	if err != nil {
		t.Fatal(err)
	}
	reviews := apiauth.Hub{Client: kube}
	_, tokenErr := reviews.ReviewToken(t.Context(), "a caller's token")
	_, accessErr := reviews.ReviewAccess(t.Context(), authorizationv1.SubjectAccessReviewSpec{User: "alice"})
	for name, err := range map[string]error{"tokenreview": tokenErr, "subjectaccessreview": accessErr} {
		if !errors.Is(err, ErrRedirect) {
			t.Errorf("%s: error = %v, want ErrRedirect", name, err)
		} else if want := "hub answered with a redirect to " + rec.srv.URL + "/stolen"; !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %q does not say %q", name, err, want)
		}
	}
	if diff := cmp.Diff([]string{}, rec.requests()); diff != "" {
		t.Errorf("requests the redirect's target got (-want +got):\n%s", diff)
	}
}

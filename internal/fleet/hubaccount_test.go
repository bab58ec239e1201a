package fleet

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes/fake"

	"crucible.dev/crucible/internal/profile"
)

// NewHubAccount names the service account of the hub token's sub claim,
// and refuses clearly, naming the file, a token that is no service
// account's: token_source = "request" cannot work then.
func TestNewHubAccount(t *testing.T) {
	enc := base64.RawURLEncoding
	jwtWithSub := func(sub string) string {
		return enc.EncodeToString([]byte(`{"alg":"RS256","kid":"k"}`)) + "." + enc.EncodeToString([]byte(`{"sub":"`+sub+`"}`)) + ".sig"
	}
	for _, tc := range []struct {
		name, token string
		wantNS      string
		wantErr     string
	}{
		{"service account", jwtWithExp(t, 1900000000) + "\n", "crucible", ""},
		{"a person", jwtWithSub("alice@example.com"), "", `subject "alice@example.com" is not system:serviceaccount:<namespace>:<name>`},
		{"a node", jwtWithSub("system:node:n1"), "", "is not system:serviceaccount"},
		{"not a JWT", "static-token", "", "not a service-account token"},
		{"empty", "", "", "not a service-account token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "hub.token")
			if err := os.WriteFile(file, []byte(tc.token), 0o600); err != nil {
				t.Fatal(err)
			}
			acct, err := NewHubAccount(fake.NewClientset(), file)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), file) {
					t.Fatalf("NewHubAccount = %v, want an error naming %s and saying %q", err, file, tc.wantErr)
				}
				if strings.Contains(err.Error(), tc.token) && tc.token != "" {
					t.Errorf("the error quotes the token: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if acct.Namespace != tc.wantNS || acct.Name != "crucible-controller" {
				t.Errorf("account %s/%s, want %s/crucible-controller", acct.Namespace, acct.Name, tc.wantNS)
			}
		})
	}
	if _, err := NewHubAccount(fake.NewClientset(), filepath.Join(t.TempDir(), "absent")); err == nil || !strings.Contains(err.Error(), "absent") {
		t.Errorf("missing file: %v", err)
	}
}

// An entry's token source: the file (also for an entry built without
// Parse, which has no token_source), or the hub, which a client without
// the hub's account cannot have.
func TestEntryTokens(t *testing.T) {
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(jwtWithExp(t, 1900000000)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, source := range []string{"", profile.TokenSourceFile} {
		ts, err := entryTokens(profile.ClusterEntry{Name: "wharf", TokenSource: source, TokenFile: file}, clientsOptions{})
		if err != nil {
			t.Fatalf("source %q: %v", source, err)
		}
		if _, ok := ts.(fileTokens); !ok {
			t.Errorf("source %q: %T, want the file", source, ts)
		}
	}
	if _, err := entryTokens(profile.ClusterEntry{Name: "wharf", TokenSource: profile.TokenSourceRequest}, clientsOptions{}); err == nil || !strings.Contains(err.Error(), "WithHubAccount") {
		t.Errorf("request without the hub account: %v", err)
	}
	if _, err := entryTokens(profile.ClusterEntry{Name: "wharf", TokenSource: "vault"}, clientsOptions{}); err == nil || !strings.Contains(err.Error(), `"vault"`) {
		t.Errorf("unknown source: %v", err)
	}
	if _, err := NewClients([]profile.ClusterEntry{{Name: "wharf", Server: "https://wharf.example.com", TokenSource: profile.TokenSourceRequest}}); err == nil || !strings.Contains(err.Error(), "cluster wharf") {
		t.Errorf("NewClients of a request entry without the hub: %v", err)
	}
}

// A hub token that is a pod's projected token names that pod, which the
// requested tokens are then bound to; one without a pod claim binds them to
// nothing; a pod claim without both name and uid is refused, naming the
// file, rather than taken for no pod.
func TestNewHubAccountPod(t *testing.T) {
	enc := base64.RawURLEncoding
	withKube := func(kube string) string {
		claims := `{"sub":"system:serviceaccount:crucible:crucible-controller"` + kube + `}`
		return enc.EncodeToString([]byte(`{"alg":"RS256","kid":"k"}`)) + "." + enc.EncodeToString([]byte(claims)) + ".sig"
	}
	for _, tc := range []struct {
		name, token string
		want        BoundPod
		wantRef     bool
		wantErr     string
	}{
		{"in a pod", withKube(`,"kubernetes.io":{"namespace":"crucible","pod":{"name":"crucible-0","uid":"u-1"},"serviceaccount":{"name":"crucible-controller","uid":"sa-1"}}`),
			BoundPod{Name: "crucible-0", UID: "u-1"}, true, ""},
		{"no pod claim", withKube(`,"kubernetes.io":{"namespace":"crucible","serviceaccount":{"name":"crucible-controller","uid":"sa-1"}}`), BoundPod{}, false, ""},
		{"no kubernetes.io claim", withKube(""), BoundPod{}, false, ""},
		{"a pod without uid", withKube(`,"kubernetes.io":{"pod":{"name":"crucible-0"}}`), BoundPod{}, false, `kubernetes.io.pod claim has name "crucible-0" and uid ""`},
		{"a pod claim of another shape", withKube(`,"kubernetes.io":{"pod":"crucible-0"}`), BoundPod{}, false, "its kubernetes.io claim"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "hub.token")
			if err := os.WriteFile(file, []byte(tc.token), 0o600); err != nil {
				t.Fatal(err)
			}
			acct, err := NewHubAccount(fake.NewClientset(), file)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), file) {
					t.Fatalf("NewHubAccount = %v, want an error naming %s and saying %q", err, file, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if acct.Pod != tc.want {
				t.Errorf("pod %+v, want %+v", acct.Pod, tc.want)
			}
			ref := acct.boundObjectRef()
			if (ref != nil) != tc.wantRef || ref != nil && (ref.Kind != "Pod" || ref.APIVersion != "v1" || ref.Name != tc.want.Name || string(ref.UID) != tc.want.UID) {
				t.Errorf("boundObjectRef %+v, want one for %+v: %v", ref, tc.want, tc.wantRef)
			}
		})
	}
}

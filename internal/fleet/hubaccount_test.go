package fleet

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes/fake"
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
	for _, source := range []string{"", TokenSourceFile} {
		ts, err := entryTokens(ClusterEntry{Name: "wharf", TokenSource: source, TokenFile: file}, clientsOptions{})
		if err != nil {
			t.Fatalf("source %q: %v", source, err)
		}
		if _, ok := ts.(fileTokens); !ok {
			t.Errorf("source %q: %T, want the file", source, ts)
		}
	}
	if _, err := entryTokens(ClusterEntry{Name: "wharf", TokenSource: TokenSourceRequest}, clientsOptions{}); err == nil || !strings.Contains(err.Error(), "WithHubAccount") {
		t.Errorf("request without the hub account: %v", err)
	}
	if _, err := entryTokens(ClusterEntry{Name: "wharf", TokenSource: "vault"}, clientsOptions{}); err == nil || !strings.Contains(err.Error(), `"vault"`) {
		t.Errorf("unknown source: %v", err)
	}
	if _, err := NewClients([]ClusterEntry{{Name: "wharf", Server: "https://wharf.example.com", TokenSource: TokenSourceRequest}}); err == nil || !strings.Contains(err.Error(), "cluster wharf") {
		t.Errorf("NewClients of a request entry without the hub: %v", err)
	}
}

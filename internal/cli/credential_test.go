package cli

import (
	"bytes"
	"crypto/elliptic"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/google/go-cmp/cmp"

	"crucible.dev/crucible/internal/jwt"
	"crucible.dev/crucible/internal/jwt/jwttest"
)

var credNow = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// saToken signs a token shaped like a projected service-account token.
func saToken(t *testing.T, exp time.Time) string {
	t.Helper()
	claims := map[string]any{
		"iss": "https://kubernetes.default.svc", "sub": "system:serviceaccount:crucible:crucible-controller",
		"aud": []string{"wharf"}, "iat": exp.Add(-time.Hour).Unix(), "nbf": exp.Add(-time.Hour).Unix(),
	}
	if !exp.IsZero() {
		claims["exp"] = exp.Unix()
	}
	return jwttest.Sign(t, jwttest.ECKey(elliptic.P256()), jose.ES256, "k1", claims, nil)
}

// The plugin answers in the version client-go asks for, with the token and
// its exp; without KUBERNETES_EXEC_INFO (run by hand) it answers v1.
func TestExecCredentialVersions(t *testing.T) {
	exp := credNow.Add(10 * time.Minute)
	token := saToken(t, exp)
	for _, tc := range []struct{ name, info, want string }{
		{"no exec info", "", "client.authentication.k8s.io/v1"},
		{"v1", `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","spec":{"interactive":false}}`, "client.authentication.k8s.io/v1"},
		{"v1beta1", `{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential","spec":{}}`, "client.authentication.k8s.io/v1beta1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := execCredential(tc.info, token, "/f", credNow)
			if err != nil {
				t.Fatal(err)
			}
			var got struct {
				APIVersion, Kind string
				Status           struct {
					Token               string
					ExpirationTimestamp string
				}
			}
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("decode %s: %v", out, err)
			}
			want := got
			want.APIVersion, want.Kind = tc.want, "ExecCredential"
			want.Status.Token, want.Status.ExpirationTimestamp = token, exp.Format(time.RFC3339)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("ExecCredential (-want +got):\n%s", diff)
			}
		})
	}
}

// Every refusal names the file and never contains the token.
func TestExecCredentialRefusals(t *testing.T) {
	expired := saToken(t, credNow.Add(-90*time.Second))
	for _, tc := range []struct {
		name, info, token string
		want              error
		wantText          string
	}{
		{name: "expired", token: expired, want: ErrTokenExpired, wantText: "token expired at 2026-11-30T11:58:30Z (1m30s ago)"},
		{name: "expires now", token: saToken(t, credNow), want: ErrTokenExpired},
		{name: "no exp", token: saToken(t, time.Time{}), want: ErrTokenMalformed, wantText: "no exp claim"},
		{name: "not a JWT", token: "hello", want: ErrTokenMalformed},
		{name: "JSON serialization", token: `{"payload":"x"}`, want: jwt.ErrMalformed},
		{name: "alg none", token: jwttest.Raw(map[string]any{"alg": "none"}, map[string]any{"exp": credNow.Add(time.Hour).Unix()}, ""), want: ErrTokenMalformed},
		{name: "exp not a number", token: jwttest.Raw(map[string]any{"alg": "RS256"}, map[string]any{"exp": "tomorrow"}, "c2ln"), want: ErrTokenMalformed},
		{name: "oversized", token: strings.Repeat("a.", jwt.MaxTokenBytes), want: ErrTokenMalformed},
		{name: "unknown version", info: `{"apiVersion":"client.authentication.k8s.io/v2"}`, token: saToken(t, credNow.Add(time.Hour)), want: ErrExecInfoVersion},
		{name: "hostile exec info", info: `{"apiVersion":`, token: saToken(t, credNow.Add(time.Hour)), wantText: "KUBERNETES_EXEC_INFO: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := execCredential(tc.info, tc.token, "/var/run/secrets/crucible/wharf/token", credNow)
			if err == nil {
				t.Fatalf("accepted: %s", out)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("error %v, want %v", err, tc.want)
			}
			if tc.info == "" && !strings.Contains(err.Error(), "token file /var/run/secrets/crucible/wharf/token: ") {
				t.Errorf("error %q does not name the file", err)
			}
			if !strings.Contains(err.Error(), tc.wantText) {
				t.Errorf("error %q, want it to contain %q", err, tc.wantText)
			}
			if len(tc.token) > 20 && strings.Contains(err.Error(), tc.token) {
				t.Errorf("error contains the token")
			}
		})
	}
}

// The command reads the file (trailing newline trimmed) and refuses a
// missing, empty, oversized or expired one, naming it.
func TestCredentialCommand(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	valid := saToken(t, time.Now().Add(time.Hour))
	t.Setenv(execInfoEnv, `{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential"}`)

	var out, errOut bytes.Buffer
	if err := Run(t.Context(), []string{"credential", "--token-file", write("good", valid+"\n")}, &out, &errOut); err != nil {
		t.Fatalf("valid token: %v", err)
	}
	if !strings.Contains(out.String(), `"apiVersion":"client.authentication.k8s.io/v1beta1"`) || !strings.Contains(out.String(), `"token":"`+valid+`"`) {
		t.Errorf("output %s", out.String())
	}

	for _, tc := range []struct {
		name, file string
		want       error
	}{
		{"missing", filepath.Join(dir, "absent"), fs.ErrNotExist},
		{"empty", write("empty", " \n"), ErrTokenMalformed},
		{"oversized", write("big", strings.Repeat("x", jwt.MaxTokenBytes+1)), ErrTokenMalformed},
		{"expired", write("old", saToken(t, time.Now().Add(-time.Hour))), ErrTokenExpired},
		{"a directory", dir, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out.Reset()
			err := Run(t.Context(), []string{"credential", "--token-file", tc.file}, &out, &errOut)
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "token file "+tc.file+": ") {
				t.Errorf("error %q does not start with the file", err)
			}
			if out.Len() != 0 {
				t.Errorf("printed %q", out.String())
			}
		})
	}
	if err := Run(t.Context(), []string{"credential"}, &out, &errOut); err == nil || !strings.Contains(err.Error(), "token-file") {
		t.Errorf("without --token-file: %v", err)
	}
}

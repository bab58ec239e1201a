package cli

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// kubeconfig writes a kubeconfig whose current context's user is user (YAML
// lines under "user:"). Its server is never contacted.
func kubeconfig(t *testing.T, dir, user string) string {
	t.Helper()
	path := filepath.Join(dir, "kubeconfig")
	data := `apiVersion: v1
kind: Config
clusters:
- name: hub
  cluster:
    server: https://hub.invalid:6443
users:
- name: me
  user:
` + user + `
contexts:
- name: hub
  context: {cluster: hub, user: me}
current-context: hub
`
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCredentials(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	plugin := filepath.Join(dir, "plugin.sh")
	if err := os.WriteFile(plugin, []byte(`#!/bin/sh
printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"from-exec"}}'
`), 0o700); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		creds   apiCredentials
		env     string
		want    string // the Authorization header the controller sees
		wantErr string
	}{
		{"none", apiCredentials{}, "", "", ""},
		{"--token", apiCredentials{token: "flag-token"}, "", "Bearer flag-token", ""},
		{"--token wins over a kubeconfig", apiCredentials{token: "flag-token", kubeconfig: kubeconfig(t, t.TempDir(), "    token: other")}, "", "Bearer flag-token", ""},
		{"kubeconfig token", apiCredentials{kubeconfig: kubeconfig(t, t.TempDir(), "    token: static-token")}, "", "Bearer static-token", ""},
		{"kubeconfig token file", apiCredentials{kubeconfig: kubeconfig(t, t.TempDir(), "    tokenFile: "+tokenFile)}, "", "Bearer from-file", ""},
		{"kubeconfig exec plugin", apiCredentials{kubeconfig: kubeconfig(t, t.TempDir(),
			"    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: "+plugin+"\n      interactiveMode: Never")}, "", "Bearer from-exec", ""},
		{"$KUBECONFIG", apiCredentials{}, kubeconfig(t, t.TempDir(), "    token: env-token"), "Bearer env-token", ""},
		{"missing kubeconfig", apiCredentials{kubeconfig: filepath.Join(dir, "nope")}, "", "", "kubeconfig " + filepath.Join(dir, "nope") + ":"},
		{"garbled kubeconfig", apiCredentials{kubeconfig: tokenFile}, "", "", "kubeconfig " + tokenFile + ":"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("KUBECONFIG", tc.env)
			var got string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got = r.Header.Get("Authorization")
				if r.Header.Get("X-Crucible-Client") == "" {
					t.Error("request without the client header")
				}
				_, _ = w.Write([]byte("{}"))
			}))
			defer srv.Close()
			credentials = tc.creds
			defer func() { credentials = apiCredentials{} }()
			var out map[string]any
			err := newAPIClient(srv.URL).do(t.Context(), http.MethodPost, "/api/pods/x/cancel", nil, &out)
			if tc.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want prefix %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("Authorization = %q, want %q", got, tc.want)
			}
		})
	}
}

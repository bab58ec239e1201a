package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
)

// credentialKubeconfig is a kubeconfig for spoke whose only credential is
// `crucible credential --token-file tokenFile`, as docs/cli.md
// shows it.
func credentialKubeconfig(t testing.TB, s *devstack.Stack, spoke *devstack.Cluster, tokenFile string) string {
	t.Helper()
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: %[1]s
  cluster: {server: %[2]q, certificate-authority: %[3]q}
users:
- name: crucible-%[1]s
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: %[4]q
      args: [credential, --token-file, %[5]q]
      interactiveMode: Never
contexts:
- name: %[1]s
  context: {cluster: %[1]s, user: crucible-%[1]s}
current-context: %[1]s
`, spoke.Name, spoke.Server, s.CAFile, devstacktest.CrucibleBinary(t), tokenFile)
	path := filepath.Join(t.TempDir(), spoke.Name+".kubeconfig")
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func kubectl(t testing.TB, kubeconfig string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), devstack.FindTools().Kubectl(), append([]string{"--kubeconfig", kubeconfig}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG=")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// kubectl with a kubeconfig whose user is `crucible credential` reaches
// each spoke as the hub controller's federated identity: the projected hub
// token (audience = the spoke) that the dev stack's kubelet stand-in keeps
// fresh, checked by the spoke's authn webhook against the mirror's keys.
func TestCredentialPluginKubectlWhoami(t *testing.T) {
	s := sharedStack(t)
	for _, spoke := range s.Spokes {
		kc := credentialKubeconfig(t, s, spoke, s.Federation.SpokeTokenFiles[spoke.Name])
		out, err := kubectl(t, kc, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
		if err != nil || out != controllerUser {
			t.Errorf("%s: kubectl auth whoami = %q, %v; want %q", spoke.Name, out, err, controllerUser)
		}
		// And it may do what R-ID4 grants, nothing more.
		out, err = kubectl(t, kc, "auth", "can-i", "create", "pods", "-n", devstack.SpokeNamespace)
		if err != nil || strings.TrimSpace(out) != "yes" {
			t.Errorf("%s: can-i create pods = %q, %v", spoke.Name, out, err)
		}
		out, _ = kubectl(t, kc, "auth", "can-i", "get", "secrets", "-n", devstack.SpokeNamespace)
		if strings.TrimSpace(out) != "no" {
			t.Errorf("%s: can-i get secrets = %q; want no", spoke.Name, out)
		}
	}
}

// An expired token file stops kubectl with an error that names the file,
// before anything reaches the spoke; an unreadable one likewise.
func TestCredentialPluginExpiredToken(t *testing.T) {
	s := sharedStack(t)
	spoke := s.Spoke("wharf")
	claims := hubClaims(devstack.HubSubject, spoke.Name)
	claims["iat"], claims["nbf"] = time.Now().Add(-2*time.Hour).Unix(), time.Now().Add(-2*time.Hour).Unix()
	claims["exp"] = time.Now().Add(-time.Hour).Unix()
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(forged{claims: claims}.signRS256(t, s.Hub.ServiceAccountKey.Key)), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tokenFile := range map[string]string{"expired": file, "missing": file + ".absent"} {
		out, err := kubectl(t, credentialKubeconfig(t, s, spoke, tokenFile), "auth", "whoami")
		if err == nil {
			t.Fatalf("%s: kubectl succeeded: %s", name, out)
		}
		want := "token file " + tokenFile + ": "
		if name == "expired" {
			want += "token expired at "
		}
		if !strings.Contains(out, want) {
			t.Errorf("%s: kubectl said %q; want it to contain %q", name, out, want)
		}
	}
}
